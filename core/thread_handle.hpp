// A thread handle: the td_thr_* functions of the seed pages for one
// user-level thread. The handle's value is the thread's record in the target
// (glibc: its struct pthread, i.e. the pthread_t). Implemented one td_*
// function per file (core/td_thr_*.cpp).
#pragma once

#include <optional>
#include <utility>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/td_result.hpp"

namespace tdctl::core {

class thread_agent;
struct td_message;

class thread_handle {
public:
    thread_handle(thread_agent& agent, target_addr handle) : agent_(&agent), handle_(handle) {}

    target_addr value() const { return handle_; }
    thread_agent& agent() const { return *agent_; }
    /// True before the thread library initialised (no record yet).
    bool is_null() const { return handle_.is_null(); }

    /// td_thr_event_enable: writes the thread's enable flag (ti_traceme).
    /// With a null handle, writes the flag new threads start with (glibc's
    /// __nptl_initial_report_events); TD_NOCAPAB if there is none.
    td_status event_enable(bool on) const;

    /// td_thr_set_event / td_thr_clear_event: OR / AND-NOT into the thread's
    /// own mask. TD_NOCAPAB with a null handle.
    td_status set_event(const td_thr_events_t& events) const;
    td_status clear_event(const td_thr_events_t& events) const;

    /// td_thr_event_getmsg: consumes this thread's buffered message and takes
    /// the thread off the message list wherever it sits. TD_NOMSG if empty.
    td_result<td_message> event_getmsg() const;

    /// td_thr_get_info: ti_tid (the handle), ti_lid (lwp(), or the process ID
    /// when no LWP runs the thread, as glibc reports a cleared tid),
    /// ti_startfunc, ti_state, ti_traceme, ti_events, ti_type; other fields
    /// zero. TD_BADTH when the record cannot be read, TD_DBERR when part of it
    /// cannot.
    td_result<td_thrinfo_t> get_info() const;
    /// get_info() and lwp() from the same one read of the record (the thread
    /// list's row: a `threads` of T threads then reads T records once each).
    td_result<std::pair<td_thrinfo_t, std::optional<tid_t>>> get_info_and_lwp() const;

    /// The LWP that runs this thread now, as a TID of tdctl's PID namespace
    /// (the record's tid is the target's own: mapped through NSpid), or
    /// std::nullopt when none does: the thread has ended and its record waits
    /// to be joined (tid 0, or -1 while pthread_join frees it; glibc after
    /// 2.42 keeps the tid, so also when no LWP of the target has that TID, or
    /// the LWP that has it runs another record), or it is not cloned yet. A
    /// null handle is the process's only thread. TD_BADTH when the record
    /// cannot be read.
    td_result<std::optional<tid_t>> lwp() const;

    bool operator==(const thread_handle& o) const { return handle_ == o.handle_; }

private:
    /// lwp() for a record whose tid field holds `tid` (already read).
    std::optional<tid_t> lwp_of_record_tid(pid_t tid) const;
    thread_agent* agent_;
    target_addr handle_;
};

}  // namespace tdctl::core
