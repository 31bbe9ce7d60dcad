// tdagent (libtdagent.so, agent/) publishes the same protocol as nptl under
// its own names (SPEC §5): descriptors _tdagent_db_*, the global mask
// __tdagent_threads_events, the list head __tdagent_last_event, the live
// thread list __tdagent_thread_list, counters, and one reporting function per
// event, each called with the subject record as its first argument.
#include <array>

#include <fmt/format.h>

#include "core/thread_agent.hpp"
#include "events/event_names.hpp"

namespace tdctl::core {

namespace {
constexpr std::string_view agent_module = "libtdagent.so";
constexpr std::string_view db_prefix = "_tdagent_db_";
}  // namespace

std::optional<protocol_layout> probe_tdagent(target_access& target, std::string& why)
{
    if (!target.has_module(agent_module)) {
        why = "libtdagent.so is not loaded (launch with --agent)";
        return std::nullopt;
    }
    auto version = target.lookup_symbol(agent_module, "__tdagent_version");
    if (!version) {
        why = "libtdagent.so does not export __tdagent_version";
        return std::nullopt;
    }
    protocol_layout l;
    l.backend = "tdagent";
    l.module = std::string(agent_module);
    if (!read_record_layout(target, agent_module, db_prefix, "__tdagent_version", l)) {
        why = "libtdagent.so lacks some _tdagent_db_* descriptors (a mismatched build?)";
        return std::nullopt;
    }
    if (l.version.starts_with("tdagent "))
        l.version.erase(0, 8);  // "tdagent 1" -> "1"
    auto var = [&](std::string_view name) {
        auto s = target.lookup_symbol(agent_module, name);
        return s ? s->address : target_addr{};
    };
    l.global_mask = var("__tdagent_threads_events");
    l.last_event = var("__tdagent_last_event");
    l.nthreads = var("__tdagent_nthreads");
    l.concurrency_level = var("__tdagent_concurrency");
    target_addr list = var("__tdagent_thread_list");
    if (l.global_mask.is_null() || l.last_event.is_null() || list.is_null()) {
        why = "libtdagent.so lacks its global mask, list head or thread list";
        return std::nullopt;
    }
    l.thread_list_heads = {list};
    l.handle_is_thread_pointer = false;
    l.subject_in_first_argument = true;
    for (td_event_e e : events::all_events()) {
        std::string name = "__tdagent_event_" + events::event_short_name(e);
        if (auto s = target.lookup_symbol(agent_module, name))
            l.event_addresses[e] = reporting_address{s->address, s->size, name};
    }
    if (l.event_addresses.empty()) {
        why = "libtdagent.so exports no __tdagent_event_* reporting functions";
        return std::nullopt;
    }
    return l;
}

}  // namespace tdctl::core
