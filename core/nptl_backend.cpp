// glibc's nptl publishes the event protocol itself (SPEC §2.1): reporting
// functions __nptl_create_event / __nptl_death_event, the global mask
// __nptl_threads_events, the list head __nptl_last_event, and the layout of
// struct pthread as _thread_db_* descriptors. This file only finds them.
#include <array>

#include <fmt/format.h>

#include "core/thread_agent.hpp"

namespace tdctl::core {

namespace {

constexpr std::string_view db_prefix = "_thread_db_";

// Modules that may carry nptl: glibc ≥ 2.34 has it in libc.so.6, older ones
// in libpthread.so.0; a static program carries it in the executable ("" =
// any module).
constexpr std::array<std::string_view, 3> nptl_modules{"libc.so.6", "libpthread.so.0", ""};

}  // namespace

std::optional<protocol_layout> probe_nptl(target_access& target, std::string& why)
{
    std::string module;
    std::optional<symbols::symbol> version_sym;
    for (std::string_view m : nptl_modules) {
        if (!m.empty() && !target.has_module(m))
            continue;
        version_sym = target.lookup_symbol(m, "__nptl_version");
        if (version_sym) {
            module = std::string(m);
            break;
        }
    }
    if (!version_sym) {
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

    protocol_layout l;
    l.backend = "nptl";
    l.module = module.empty() ? "(executable)" : module;
    auto var = [&](std::string_view name) -> target_addr {
        auto s = target.lookup_symbol(module, name);
        return s ? s->address : target_addr{};
    };
    if (!read_record_layout(target, module, db_prefix, "__nptl_version", l)) {
        why = fmt::format("{} has __nptl_version but lacks the _thread_db_* descriptors of struct pthread", l.module);
        return std::nullopt;
    }

    l.global_mask = var("__nptl_threads_events");
    l.last_event = var("__nptl_last_event");
    l.nthreads = var("__nptl_nthreads");
    if (l.global_mask.is_null() || l.last_event.is_null()) {
        why = fmt::format("{} lacks __nptl_threads_events or __nptl_last_event", l.module);
        return std::nullopt;
    }
    // glibc ≥ 2.34 keeps the flag for not-yet-initialised threads in ld.so.
    for (std::string_view m : {std::string_view("ld-linux"), std::string_view(module)}) {
        if (auto s = target.lookup_symbol(m, "__nptl_initial_report_events")) {
            l.initial_report_events = s->address;
            break;
        }
    }

    // Live-thread lists: _rtld_global._dl_stack_used / _dl_stack_user in ld.so
    // (dynamic), or the plain variables _dl_stack_used / _dl_stack_user (static).
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
    if (!rtld_global.is_null() && used.is_valid() && user.is_valid()) {
        l.thread_list_heads = {rtld_global + user.offset, rtld_global + used.offset};
    } else {
        target_addr a = var("_dl_stack_user"), b = var("_dl_stack_used");
        if (!a.is_null())
            l.thread_list_heads.push_back(a);
        if (!b.is_null())
            l.thread_list_heads.push_back(b);
    }
    if (l.thread_list_heads.empty()) {
        why = fmt::format("{}: cannot find the thread lists (_dl_stack_used/_dl_stack_user)", l.module);
        return std::nullopt;
    }

    // pthread_setconcurrency's level: a local symbol, in libc's debug file.
    if (auto s = target.lookup_symbol(module, "__concurrency_level"))
        l.concurrency_level = s->address;

    for (auto [e, name] : {std::pair{TD_CREATE, "__nptl_create_event"}, std::pair{TD_DEATH, "__nptl_death_event"}}) {
        if (auto s = target.lookup_symbol(module, name))
            l.event_addresses[e] = reporting_address{s->address, s->size, name};
    }
    if (l.event_addresses.empty()) {
        why = fmt::format("{} lacks __nptl_create_event and __nptl_death_event", l.module);
        return std::nullopt;
    }
    return l;
}

}  // namespace tdctl::core
