// One drained event message, as the sinks print it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "events/stack_frame.hpp"

namespace tdctl::events {

/// The kind of lock a TD_LOCK_TRY / TD_SLEEP waits for (core/locks/lock_probe.hpp).
/// A semaphore is one the agent knows as a lock (initialised to 1;
/// core/locks/lock_semaphores.hpp); its holder is inferred.
enum class lock_kind { unknown, mutex, rwlock, spin, semaphore };

/// A td_event_msg_t plus what the controller knows about it.
struct event_message {
    td_event_e event = TD_EVENT_NONE;
    tid_t tid;                  ///< the LWP the message is about (0 when unknown)
    /// The same LWP's TID in the target's PID namespace (gettid() there, from
    /// NSpid), set only when that namespace is not tdctl's (a container).
    std::optional<pid_t> ns_tid;
    target_addr handle;         ///< thread handle: struct pthread address (nptl) or agent record
    std::uint64_t data = 0;     ///< td_event_msg_t.msg.data (for TD_CREATE/TD_DEATH: a handle)
    tid_t reporter;             ///< the LWP that hit the reporting address (0 for a manual getmsg)
    double time = 0;            ///< seconds since the controller started
    std::string name;           ///< the thread's comm (/proc/PID/task/TID/comm), may be empty
    /// Empty when the thread library reported the event; "lwp-exit" for a
    /// TD_DEATH the controller saw at the LWP's exit (the thread was killed,
    /// e.g. by exit_group, before reaching the reporting address); "exec" for
    /// the TD_DEATH of a non-main thread that replaced the process image.
    std::string origin;
    /// The reporting thread's call stack at the report (`watch --bt`),
    /// innermost first: the creator for TD_CREATE, the dying thread for
    /// TD_DEATH. Empty when not asked for or not readable.
    std::vector<stack_frame> frames;
    /// TD_CREATE: the new thread's start routine (its record's
    /// start_routine field) and the symbol there; null / "" when unknown.
    target_addr start_routine;
    std::string start_symbol;
    /// TD_DEATH: ns from the thread's birth to this report; its birth is its
    /// clone stop, or /proc starttime (clock ticks) for a thread older than
    /// the session. std::nullopt when unknown.
    std::optional<std::uint64_t> lifetime_ns;
    /// TD_CREATE: where the new thread was created, the return address into
    /// the caller of pthread_create (the creator's first frame outside the
    /// thread library), read while the creator was stopped at the report;
    /// null when unknown (core/stacks/call_site.hpp). A lock event from the
    /// agent's rings: the return address into the caller of the lock call,
    /// which the agent took itself (agent/event_rings.c).
    target_addr call_site;
    /// TD_SLEEP while lock probes are on (`locks`): the kind of lock slept
    /// on, and the TID its owner field named while the reporter was stopped
    /// (target's PID namespace); std::nullopt when none was read.
    lock_kind lock = lock_kind::unknown;
    std::optional<pid_t> lock_owner;
};

}  // namespace tdctl::events
