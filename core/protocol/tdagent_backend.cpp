// tdagent (libtdagent.so, agent/) publishes the same protocol as nptl under
// its own names (SPEC §5): descriptors _tdagent_db_*, the global mask
// __tdagent_threads_events, the list head __tdagent_last_event, the live
// thread list __tdagent_thread_list, counters, and one reporting function per
// event, each called with the subject record as its first argument. This
// file finds them, and says what tdagent does its own way
// (core/protocol/thread_backend.hpp).
#include <array>
#include <unordered_map>

#include <fmt/format.h>

#include "core/thread_agent.hpp"
#include "core/protocol/thread_backend.hpp"
#include "core/thread_handle.hpp"
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
    // The record every unknown thread's TLS points at: its enable flag is the
    // flag that has such threads adopted (agent/thread_lifecycle.c).
    if (auto unknown = target.lookup_symbol(agent_module, "__tdagent_unknown_thread"))
        l.initial_report_events = unknown->address + static_cast<std::int64_t>(l.report_events.offset);
    // Stop flags (agent/event_report.c): one byte per td_event_e, and the pc
    // of the stub's stop. An agent without them is served with trap bytes.
    target_addr stop_flags = var("__tdagent_stop_signals");
    l.report_stopped_pc = stop_flags.is_null() ? target_addr{} : var("__tdagent_report_stopped");
    l.stop_flags = l.report_stopped_pc.is_null() ? target_addr{} : stop_flags;
    for (td_event_e e : events::all_events()) {
        std::string name = "__tdagent_event_" + events::event_short_name(e);
        if (auto s = target.lookup_symbol(agent_module, name)) {
            l.event_addresses[e] = reporting_address{s->address, s->size, name, {}};
            if (!l.report_stopped_pc.is_null())
                l.event_addresses[e].stop_flag = stop_flags + static_cast<std::int64_t>(e);
        }
    }
    if (l.event_addresses.empty()) {
        why = "libtdagent.so exports no __tdagent_event_* reporting functions";
        return std::nullopt;
    }
    return l;
}

namespace {

// The agent holds a new thread at its TD_CREATE report, and only then (so
// create is followed); it copies the creator's mask itself, into its own record.
constexpr backend_traits tdagent_traits{.enable_on_birth = birth_enable::at_create_report, .must_follow_create = true,
    .adopts_unknown_threads = true, .nthreads_symbol = "__tdagent_nthreads", .concurrency_symbol = "__tdagent_concurrency"};

class tdagent_backend final : public thread_backend {
public:
    explicit tdagent_backend(thread_agent& agent) : thread_backend(tdagent_traits), agent_(agent) {}

    std::optional<target_addr> handle_of(tid_t lwp) override
    {
        // The record seen in this LWP's last message, while its tid field
        // still names the LWP; otherwise the thread list.
        if (auto it = handles_by_lwp_.find(lwp); it != handles_by_lwp_.end()) {
            if (auto tid = agent_.protocol().read_tid(it->second); tid && *tid == agent_.target().ns_tid_of(lwp))
                return it->second;
            handles_by_lwp_.erase(it);
        }
        auto th = agent_.map_lwp2thr(lwp);
        if (!th || th->is_null())
            return std::nullopt;
        handles_by_lwp_[lwp] = th->value();
        return th->value();
    }

    std::optional<target_addr> thread_pointer_handle(tid_t lwp) override
    {
        (void)lwp;  // the agent's record is not the thread pointer
        return std::nullopt;
    }

    message_subject subject_of(td_event_e event, tid_t reporter, std::uint64_t arg0) override
    {
        (void)event;  // every reporting function passes the record
        message_subject s{tid_t{}, target_addr{arg0}};
        auto tid = agent_.protocol().read_tid(s.handle);
        if (auto lwp = tid ? agent_.target().lwp_of_ns_tid(*tid) : std::nullopt)
            s.lwp = *lwp;
        // A thread reporting about its own, already unregistered record (a
        // detached thread's TD_REAP at its exit) is still the reporter.
        if (s.lwp.value == 0) {
            auto known = handles_by_lwp_.find(reporter);
            if (known != handles_by_lwp_.end() && known->second == s.handle)
                s.lwp = reporter;
        }
        if (s.lwp.value != 0)
            handles_by_lwp_[s.lwp] = s.handle;
        return s;
    }

    target_addr handle_at_exec(tid_t former, target_addr thread_pointer) override
    {
        (void)thread_pointer;  // the agent's record is not the thread pointer
        auto known = handles_by_lwp_.find(former);
        return known == handles_by_lwp_.end() ? target_addr{} : known->second;
    }

    void on_exec() override { handles_by_lwp_.clear(); }

    void on_streamed_subject(tid_t lwp, target_addr handle) override { handles_by_lwp_[lwp] = handle; }

private:
    thread_agent& agent_;
    std::unordered_map<tid_t, target_addr> handles_by_lwp_;  // LWP -> record, from messages
};

}  // namespace

std::unique_ptr<thread_backend> make_tdagent_backend(thread_agent& agent)
{
    return std::make_unique<tdagent_backend>(agent);
}

}  // namespace tdctl::core
