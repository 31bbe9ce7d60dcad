// `threads`: the thread list, one row per record of the thread library and
// per LWP without one.
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "cmd/commands.hpp"
#include "cmd/records.hpp"
#include "cmd/target_hold.hpp"
#include "core/protocol/thread_list.hpp"
#include "events/event_names.hpp"
#include "ptrace/procfs.hpp"
#include "symbols/demangle.hpp"

namespace tdctl::cmd {

namespace {

std::string state_name(td_thr_state_e s)
{
    switch (s) {
    case TD_THR_ACTIVE: return "active";
    case TD_THR_ZOMBIE: return "zombie";
    case TD_THR_SLEEP: return "sleep";
    case TD_THR_RUN: return "run";
    case TD_THR_STOPPED: return "stopped";
    case TD_THR_STOPPED_ASLEEP: return "stopped-asleep";
    default: return "unknown";
    }
}

std::string state_of(const core::thread_entry& e)
{
    using kind = core::thread_entry_kind;
    switch (e.kind) {
    case kind::ended: return "zombie";
    case kind::starting: return "starting";
    case kind::lwp_only: return "lwp";
    case kind::running: break;
    }
    return e.info ? state_name(e.info->ti_state) : "unknown";
}

thread_row row_of(core::session& session, const core::thread_entry& e, bool ns_column)
{
    thread_row row;
    const bool has_lwp = e.lwp.value != 0;
    if (has_lwp)
        row.tid = e.lwp.value;
    row.ns_column = ns_column;
    row.ns_tid = e.ns_tid;
    row.state = state_of(e);
    if (e.has_record)
        row.handle = e.handle.value;
    if (e.has_record && e.info) {
        auto start = reinterpret_cast<std::uint64_t>(e.info->ti_startfunc);
        const auto* set = start ? session.target().modules_holding(target_addr{start}) : nullptr;
        row.info = thread_row::record_info{
            .startfunc = start,
            .startsym = set ? symbols::demangled(set->describe(target_addr{start})) : std::string(),
            .traceme = e.info->ti_traceme != 0,
            .events = events::format_event_set(e.info->ti_events),
        };
    }
    return row;
}

}  // namespace

command_status cmd_threads(command_context& c, const words& w, const std::string& where)
{
    if (w.size() > 1)
        return c.check.usage_error(where, "usage: threads");
    if (!c.check.require_target(where))
        return command_status::failed;

    process_record process;
    process.pid = c.session().target().pid();
    process.ns_pid = c.session().target().ns_pid();
    std::vector<thread_row> rows;
    {
        target_hold hold(c.session(), c.out);
        auto entries = core::list_threads(c.session().target(), c.session().target().agent());
        if (!entries)
            return c.check.td_error(entries.error(), fmt::format("{}: threads", where));
        process.name = procfs::process_name(c.session().target().pid());
        process.threads = entries->size();
        process.library = library_of(c.session());
        // Names come from /proc/PID/task/TID/comm, so only an LWP has one;
        // they are read together (by a few threads on a large process).
        std::vector<tid_t> lwps;
        for (const auto& e : *entries)
            if (e.lwp.value != 0)
                lwps.push_back(e.lwp);
        auto names = c.session().target().thread_names(lwps);
        std::size_t next_name = 0;
        for (const auto& e : *entries) {
            rows.push_back(row_of(c.session(), e, process.ns_pid.has_value()));
            if (e.lwp.value != 0)
                rows.back().name = std::move(names[next_name++]);
        }
    }
    c.out.print(process);
    c.out.heading(thread_columns(process.ns_pid.has_value()));
    for (const auto& row : rows)
        c.out.print(row);
    return command_status::ok;
}

}  // namespace tdctl::cmd
