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
        why = target.has_module("libc.so.6")
                  ? "libc.so.6 does not export __nptl_version (glibc older than 2.3 or a modified libc)"
                  : "no glibc thread library (nptl) symbols: the program is static and stripped, or not linked "
                    "with glibc (e.g. musl)";
        return std::nullopt;
    }

    protocol_layout l;
    l.backend = "nptl";
    l.module = module.empty() ? "(executable)" : module;
    {
        std::array<char, 32> buf{};
        std::size_t n = target.memory().read(version_sym->address, std::as_writable_bytes(std::span(buf)));
        l.version = std::string(buf.data(), strnlen(buf.data(), std::min(n, buf.size())));
    }

    auto field = [&](std::string_view name) -> db_field {
        auto f = read_db_field(target, module, db_prefix, name);
        return f.value_or(db_field{});
    };
    auto var = [&](std::string_view name) -> target_addr {
        auto s = target.lookup_symbol(module, name);
        return s ? s->address : target_addr{};
    };

    db_field eventbuf = field("pthread_eventbuf");
    db_field eventnum = field("td_eventbuf_t_eventnum");
    db_field eventdata = field("td_eventbuf_t_eventdata");
    db_field eventmask = field("pthread_eventbuf_eventmask");
    l.report_events = field("pthread_report_events");
    l.nextevent = field("pthread_nextevent");
    l.tid = field("pthread_tid");
    l.start_routine = field("pthread_start_routine");
    l.cancelhandling = field("pthread_cancelhandling");
    l.list_link = field("pthread_list");
    l.list_next = field("list_t_next");
    if (!eventbuf.is_valid() || !eventnum.is_valid() || !eventdata.is_valid() || !l.report_events.is_valid() ||
        !l.nextevent.is_valid() || !l.tid.is_valid()) {
        why = fmt::format("{} has __nptl_version but lacks the _thread_db_* descriptors of struct pthread", l.module);
        return std::nullopt;
    }
    // eventbuf's fields are published relative to td_eventbuf_t.
    l.eventnum = {eventnum.bits, eventnum.count, eventbuf.offset + eventnum.offset};
    l.eventdata = {eventdata.bits, eventdata.count, eventbuf.offset + eventdata.offset};
    l.eventmask = eventmask.is_valid() ? eventmask : db_field{64, 1, eventbuf.offset};

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
    db_field used = field("rtld_global__dl_stack_used");
    db_field user = field("rtld_global__dl_stack_user");
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
    if (l.thread_list_heads.empty() || !l.list_link.is_valid()) {
        why = fmt::format("{}: cannot find the thread lists (_dl_stack_used/_dl_stack_user)", l.module);
        return std::nullopt;
    }
    if (!l.list_next.is_valid())
        l.list_next = db_field{64, 1, 0};

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
