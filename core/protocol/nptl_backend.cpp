// glibc's nptl publishes the event protocol itself (SPEC §2.1): reporting
// functions __nptl_create_event / __nptl_death_event, the global mask
// __nptl_threads_events, the list head __nptl_last_event, and the layout of
// struct pthread as _thread_db_* descriptors. This file finds them, and says
// what nptl does its own way (core/protocol/thread_backend.hpp).
#include <array>
#include <unordered_map>

#include <fmt/format.h>

#include "core/thread_agent.hpp"
#include "core/protocol/thread_backend.hpp"

namespace tdctl::core {

namespace {

constexpr std::string_view db_prefix = "_thread_db_";

// Modules that may carry nptl: glibc ≥ 2.34 has it in libc.so.6, older ones
// in libpthread.so.0; a static program carries it in the executable ("" =
// any module).
constexpr std::array<std::string_view, 3> nptl_modules{"libc.so.6", "libpthread.so.0", ""};

// The module exporting __nptl_version ("" = the executable), or why none does.
std::optional<std::string> find_nptl_module(target_access& target, std::string& why)
{
    for (std::string_view m : nptl_modules) {
        if (!m.empty() && !target.has_module(m))
            continue;
        if (target.lookup_symbol(m, "__nptl_version"))
            return std::string(m);
    }
    if (auto problem = target.module_problem("libc.so"); !problem.empty()) {
        why = "the thread library's symbols cannot be read: " + problem;
        return std::nullopt;
    }
    why = target.has_module("libc.so.6")
              ? "libc.so.6 does not export __nptl_version (glibc older than 2.3 or a modified libc)"
              : "no glibc thread library (nptl) symbols: the program is static and stripped, or not linked "
                "with glibc (e.g. musl)";
    return std::nullopt;
}

target_addr variable(target_access& target, std::string_view module, std::string_view name)
{
    auto s = target.lookup_symbol(module, name);
    return s ? s->address : target_addr{};
}

// The live-thread lists: _rtld_global._dl_stack_used / _dl_stack_user in
// ld.so (dynamic), or the plain variables _dl_stack_used / _dl_stack_user
// (static). Empty when neither is found.
std::vector<target_addr> find_thread_lists(target_access& target, const std::string& module)
{
    db_field used = read_db_field(target, module, db_prefix, "rtld_global__dl_stack_used").value_or(db_field{});
    db_field user = read_db_field(target, module, db_prefix, "rtld_global__dl_stack_user").value_or(db_field{});
    target_addr rtld_global;
    if (auto s = target.lookup_symbol("ld-linux", "_rtld_global"))
        rtld_global = s->address;
    else if (auto p = target.lookup_symbol(module, "__nptl_rtld_global")) {
        std::uint64_t v = 0;
        if (target.memory().read_value(p->address, v))
            rtld_global = target_addr{v};
    }
    if (!rtld_global.is_null() && used.is_valid() && user.is_valid())
        return {rtld_global + user.offset, rtld_global + used.offset};
    std::vector<target_addr> heads;
    for (std::string_view name : {"_dl_stack_user", "_dl_stack_used"})
        if (target_addr a = variable(target, module, name); !a.is_null())
            heads.push_back(a);
    return heads;
}

// The global mask, the list head, the counters and ld.so's initial-report
// flag; false with `why` set when the protocol's own variables are missing.
bool find_variables(target_access& target, const std::string& module, protocol_layout& l, std::string& why)
{
    l.global_mask = variable(target, module, "__nptl_threads_events");
    l.last_event = variable(target, module, "__nptl_last_event");
    l.nthreads = variable(target, module, "__nptl_nthreads");
    if (l.global_mask.is_null() || l.last_event.is_null()) {
        why = fmt::format("{} lacks __nptl_threads_events or __nptl_last_event", l.module);
        return false;
    }
    // glibc ≥ 2.34 keeps the flag for not-yet-initialised threads in ld.so.
    for (std::string_view m : {std::string_view("ld-linux"), std::string_view(module)}) {
        if (auto s = target.lookup_symbol(m, "__nptl_initial_report_events")) {
            l.initial_report_events = s->address;
            break;
        }
    }
    // pthread_setconcurrency's level is a local symbol, only in libc's debug
    // file: looked up when statistics are read (td_ta_get_stats), not here,
    // where reading that file's symbol table was most of an attach's fixed cost.
    return true;
}

}  // namespace

std::optional<protocol_layout> probe_nptl(target_access& target, std::string& why)
{
    auto module = find_nptl_module(target, why);
    if (!module)
        return std::nullopt;
    protocol_layout l;
    l.backend = "nptl";
    l.module = module->empty() ? "(executable)" : *module;
    if (!read_record_layout(target, *module, db_prefix, "__nptl_version", l)) {
        why = fmt::format("{} has __nptl_version but lacks the _thread_db_* descriptors of struct pthread", l.module);
        return std::nullopt;
    }
    if (!find_variables(target, *module, l, why))
        return std::nullopt;
    l.thread_list_heads = find_thread_lists(target, *module);
    if (l.thread_list_heads.empty()) {
        why = fmt::format("{}: cannot find the thread lists (_dl_stack_used/_dl_stack_user)", l.module);
        return std::nullopt;
    }
    for (auto [e, name] : {std::pair{TD_CREATE, "__nptl_create_event"}, std::pair{TD_DEATH, "__nptl_death_event"}}) {
        if (auto s = target.lookup_symbol(*module, name))
            l.event_addresses[e] = reporting_address{s->address, s->size, name, {}};
    }
    if (l.event_addresses.empty()) {
        why = fmt::format("{} lacks __nptl_create_event and __nptl_death_event", l.module);
        return std::nullopt;
    }
    return l;
}

namespace {

// A new thread is enabled at its clone stop; glibc copies the creator's mask into it.
constexpr backend_traits nptl_traits{.enable_on_birth = birth_enable::at_clone_stop,
    .child_copies_creator_mask = true, .death_report_is_last = true, .nthreads_symbol = "__nptl_nthreads", .concurrency_symbol = "__concurrency_level"};

class nptl_backend final : public thread_backend {
public:
    explicit nptl_backend(thread_agent& agent) : thread_backend(nptl_traits), target_(agent.target()) {}

    std::optional<target_addr> handle_of(tid_t lwp) override { return target_.thread_pointer(lwp); }
    std::optional<target_addr> thread_pointer_handle(tid_t lwp) override { return target_.thread_pointer(lwp); }

    message_subject subject_of(td_event_e event, tid_t reporter, std::uint64_t arg0) override
    {
        (void)arg0;  // nptl's reporting functions take no argument
        message_subject s{reporter, {}};
        if (event == TD_CREATE) {
            // The clone stop came first and named the new thread.
            auto it = last_clone_child_.find(reporter);
            s.lwp = it == last_clone_child_.end() ? tid_t{} : it->second;
            if (it != last_clone_child_.end())
                last_clone_child_.erase(it);
        }
        if (s.lwp.value != 0)
            s.handle = target_.thread_pointer(s.lwp).value_or(target_addr{});
        return s;
    }

    target_addr handle_at_exec(tid_t former, target_addr thread_pointer) override
    {
        (void)former;
        return thread_pointer;
    }

    void on_clone(tid_t creator, tid_t child) override { last_clone_child_[creator] = child; }
    void on_lwp_gone(tid_t lwp) override { last_clone_child_.erase(lwp); }
    void on_exec() override { last_clone_child_.clear(); }

private:
    target_access& target_;
    std::unordered_map<tid_t, tid_t> last_clone_child_;  // creator -> newest clone child (for TD_CREATE)
};

}  // namespace

std::unique_ptr<thread_backend> make_nptl_backend(thread_agent& agent)
{
    return std::make_unique<nptl_backend>(agent);
}

}  // namespace tdctl::core
