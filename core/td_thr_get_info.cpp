// td_thr_get_info: what is known about one thread.
#include <cstring>

#include "core/thread_agent.hpp"
#include "core/protocol/thread_backend.hpp"
#include "core/thread_handle.hpp"

namespace tdctl::core {

namespace {
// glibc's cancelhandling bits (nptl/descr.h); not published as descriptors.
constexpr std::uint32_t exiting_bitmask = 0x10;
constexpr std::uint32_t terminated_bitmask = 0x20;
}  // namespace

td_result<std::optional<tid_t>> thread_handle::lwp() const
{
    auto& target = agent_->target();
    if (is_null())
        return std::optional<tid_t>(tid_t{target.pid()});
    auto tid = agent_->protocol().read_tid(handle_);
    if (!tid)
        return td_fail(TD_BADTH);
    return lwp_of_record_tid(*tid);
}

std::optional<tid_t> thread_handle::lwp_of_record_tid(pid_t tid) const
{
    if (tid <= 0)
        return std::nullopt;
    auto lwp = agent_->target().lwp_of_ns_tid(tid);
    if (!lwp)
        return std::nullopt;
    // A TID the kernel gave to a new thread after this one ended (the record
    // keeps it since glibc 2.42): where a thread pointer is a handle, that
    // LWP's is its own record.
    if (auto tp = agent_->seam().thread_pointer_handle(*lwp); tp && !tp->is_null() && *tp != handle_)
        return std::nullopt;
    return lwp;
}

td_result<td_thrinfo_t> thread_handle::get_info() const
{
    auto both = get_info_and_lwp();
    if (!both)
        return td_fail(both.error());
    return both->first;
}

td_result<std::pair<td_thrinfo_t, std::optional<tid_t>>> thread_handle::get_info_and_lwp() const
{
    td_thrinfo_t info;
    std::memset(&info, 0, sizeof info);
    info.ti_type = TD_THR_USER;
    info.ti_state = TD_THR_ACTIVE;
    auto& protocol = agent_->protocol();
    if (is_null()) {
        // Before initialisation the only thread is the main one.
        info.ti_lid = agent_->target().pid();
        if (auto on = protocol.read_initial_report_events())
            info.ti_traceme = *on ? 1 : 0;
        return std::pair{info, std::optional<tid_t>(tid_t{agent_->target().pid()})};
    }
    // Every field in one read of the target: a `threads` of T threads makes
    // T reads here, not five times as many.
    auto record = protocol.read_record_info(handle_);
    if (!record)
        return td_fail(TD_BADTH);
    auto lwp = lwp_of_record_tid(record->tid);
    info.ti_tid = static_cast<thread_t>(handle_.value);
    info.ti_lid = lwp ? lwp->value : agent_->target().pid();
    info.ti_startfunc = reinterpret_cast<psaddr_t>(record->start_routine.value);
    info.ti_traceme = record->report_events ? 1 : 0;
    info.ti_events = record->mask;
    const std::uint32_t cancel = record->cancelhandling;
    if ((cancel & exiting_bitmask) == 0)
        info.ti_state = TD_THR_ACTIVE;
    else if ((cancel & terminated_bitmask) == 0)
        info.ti_state = TD_THR_ZOMBIE;
    else
        info.ti_state = TD_THR_UNKNOWN;
    return std::pair{info, lwp};
}

}  // namespace tdctl::core
