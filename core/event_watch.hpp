// The event corridor: turns "LWP X stopped at the reporting address of event
// E" into exactly one event message, and builds the TD_DEATH of a thread the
// library never reported (killed at exit_group, or replaced by an exec). The
// backend (core/thread_backend.hpp) says which record holds the message; this
// unit reads and consumes it and builds the message — one builder for every
// origin. The session routes stops here; what to show is its decision.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/event_protocol.hpp"
#include "core/thread_backend.hpp"
#include "events/event_message.hpp"

namespace tdctl::core {

class session;
class thread_agent;

/// A message taken at a reporting address.
struct drained_message {
    events::event_message message;
    /// For TD_CREATE read from the new thread's own record: that record (a
    /// thread to enable when the backend enables at the create report).
    target_addr newborn;
    /// What the consume did with the caller's extras (consume_extras).
    bool extras_read = false;
    bool flag_changed = false;
};

/// The extras one report's consume carries, chosen once its subject is known.
using extras_for_subject = std::function<consume_extras(const message_subject&)>;

class event_watch {
public:
    /// `target` names threads and maps TIDs; `agent` and `backend` read the
    /// target's records. All three must outlive the corridor.
    event_watch(session& target, thread_agent& agent, thread_backend& backend)
        : target_(target), agent_(agent), backend_(backend)
    {
    }

    /// `reporter` stopped at `event`'s reporting address; `arg0` is the
    /// reporting function's first argument. Consumes the message from the
    /// record the backend names (or, when it names none — the thread was
    /// created before the attach — the head of the library's list).
    /// std::nullopt when there is no message to take.
    /// `extras` (optional) adds reads and a flag change to the consume.
    std::optional<drained_message> at_reporting_address(td_event_e event, tid_t reporter, std::uint64_t arg0,
                                                        const extras_for_subject& extras = {});

    /// `lwp` is in its exit stop. While TD_DEATH is armed (`death_armed`), a
    /// thread that reports events but never reached the reporting address
    /// (exit_group) gets its TD_DEATH from here (origin "lwp-exit"); its
    /// buffer is consumed. std::nullopt when there is none, or when `silent`.
    std::optional<events::event_message> at_exit_stop(tid_t lwp, bool death_armed, bool silent);

    /// `former`, a thread other than the main one, exec'd: its old LWP is
    /// gone. While TD_DEATH is armed, its TD_DEATH (origin "exec");
    /// `thread_pointer` is what the exec stop reported, `ns_tid` its TID in
    /// the target's namespace if one was seen. Forgets every LWP seen so far.
    std::optional<events::event_message> at_exec(tid_t former, target_addr thread_pointer, bool death_armed,
                                                 std::optional<pid_t> ns_tid);

    /// `lwp` was born now (its clone stop): the start of its lifetime.
    void born(tid_t lwp);

    /// `lwp` is gone (its exit was reaped).
    void forget(tid_t lwp)
    {
        death_reported_.erase(lwp);
        born_ns_.erase(lwp);
    }

private:
    /// The one builder of a message, whatever its origin ("" = the library
    /// reported it). `data` starts as the handle (TD_CREATE/TD_DEATH carry one).
    static events::event_message message_of(td_event_e event, tid_t reporter, const message_subject& subject,
                                            std::string_view origin, std::optional<pid_t> ns_tid,
                                            std::string name);
    /// The library's list, head first: a message whose record is not known.
    std::optional<drained_message> from_list(td_event_e event, tid_t reporter);
    /// ns from `lwp`'s birth to now: from its clone stop when it was born
    /// while traced, else from /proc starttime (clock ticks since boot).
    std::optional<std::uint64_t> lifetime_of(tid_t lwp);

    session& target_;
    thread_agent& agent_;
    thread_backend& backend_;
    // LWPs whose TD_DEATH came through the reporting address.
    std::unordered_set<tid_t> death_reported_;
    // CLOCK_MONOTONIC ns of each LWP's clone stop.
    std::unordered_map<tid_t, std::uint64_t> born_ns_;
};

}  // namespace tdctl::core
