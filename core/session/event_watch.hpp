// The watch: what tdctl plants and arms to learn of thread events, and the
// one way a stop at an event reporting address becomes one event message.
// It plants the sites (trap bytes, or the agent's signal stops), arms the
// global mask and every thread's enable flag (new threads through the
// birth policy), keeps the `stop` breakpoints apart from the watched ones,
// and at each report consumes the message from the record the backend
// names (core/protocol/thread_backend.hpp) and builds it — one builder for every
// origin, the TD_DEATH of a thread that never reported (killed at
// exit_group, replaced by an exec) included. It never resumes a thread and
// never calls back into the session: what to show is returned.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/session/birth_policy.hpp"
#include "core/stacks/call_site.hpp"
#include "core/protocol/event_protocol.hpp"
#include "core/stacks/event_stacks.hpp"
#include "core/session/live_target.hpp"
#include "core/session/report_changes.hpp"
#include "core/td_result.hpp"
#include "events/event_message.hpp"
#include "ptrace/traced_process.hpp"

namespace tdctl::core {

class event_watch {
public:
    /// All four must outlive the watch.
    event_watch(live_target& target, report_changes& changes, birth_policy& births, event_stacks& stacks)
        : target_(target), changes_(changes), births_(births), stacks_(stacks)
    {
    }

    // ---- watching: every message of the armed events as it happens

    /// Plants sites at the events' reporting addresses, adds them to the
    /// global mask and enables reporting on every thread (new ones as they
    /// are born), with every thread held meanwhile. TD_NOLIBTHREAD without
    /// a thread library; TD_NOEVENT if an event has no reporting address.
    /// An arm already in force is ended first (end_arm(), without settling).
    td_status arm(const std::vector<td_event_e>& events);
    bool is_armed() const { return armed_.has_value(); }
    const std::vector<td_event_e>& armed_events() const;
    /// disarm, first half (every thread held): the global mask, the initial
    /// flag and live threads' flags back to what they were before arm().
    void restore_before_arm();
    /// disarm, second half (late reports settled, every thread held): the
    /// arm is over and its sites go.
    void end_arm();

    // ---- stopping at events (the seed's flow by hand)

    /// Plants sites only; a hit is_stop_site(). TD_NOEVENT if an event has
    /// no reporting address.
    td_status plant_stops(const std::vector<td_event_e>& events);
    bool has_stops() const { return !stop_events_.empty(); }
    /// The `stop` sites go (every thread held).
    void end_stops();
    /// The site at `address` is a `stop` breakpoint; `event` is set to its event.
    bool is_stop_site(target_addr address, td_event_e& event) const;

    // ---- reports

    /// `ev` is a thread trapped at a watched site (not a `stop`): the message
    /// is taken from its record, with the reporter's stack, lock and call
    /// site as asked for (event_stacks). A message to show, or std::nullopt:
    /// none (`silent`, not asked for, nothing buffered, an adoption). The
    /// reporter stays stopped for the caller to resume.
    std::optional<events::event_message> at_site(const ptrace::stop_event& ev, bool silent);
    /// `lwp` is in its exit stop. While TD_DEATH is armed, a thread that
    /// reports events but never reached the reporting address (exit_group)
    /// gets its TD_DEATH from here (origin "lwp-exit"); its buffer is
    /// consumed. std::nullopt when there is none, or when `silent`.
    /// With `every_thread_reports` (TD_DEATH streamed: every thread reports
    /// it, whatever its flag), a thread's own flag is not asked.
    std::optional<events::event_message> at_exit_stop(tid_t lwp, bool silent, bool every_thread_reports = false);
    /// ns from `lwp`'s birth to `at_ns` (CLOCK_MONOTONIC; none: now): from
    /// its clone stop when it was born while traced, else from /proc
    /// starttime (clock ticks since boot). A streamed TD_DEATH gives the
    /// ring's time, not the drain's.
    std::optional<std::uint64_t> lifetime_of(tid_t lwp, std::optional<std::uint64_t> at_ns = std::nullopt);
    /// `former`, a thread other than the main one, exec'd: its old LWP is
    /// gone. While TD_DEATH is armed, its TD_DEATH (origin "exec");
    /// `thread_pointer` is what the exec stop reported. Forgets every LWP
    /// seen so far.
    std::optional<events::event_message> at_exec(tid_t former, target_addr thread_pointer);
    /// `lwp` was born now (its clone stop): the start of its lifetime.
    void born(tid_t lwp);
    /// `lwp` is gone (its exit was reaped).
    void forget(tid_t lwp)
    {
        death_reported_.erase(lwp);
        born_ns_.erase(lwp);
    }

    /// What the enabling of new threads needs to know of the watch.
    watch_mode mode() const;

    // ---- the image and the end

    /// What was armed (`watch`) and planted to stop at (`stop`) in an image.
    struct image_events {
        std::vector<td_event_e> armed, stops;
    };
    /// An exec replaced the image (the sites went with it): everything
    /// planted and armed is forgotten; returns what was.
    image_events forget_image();
    /// After an exec, arms and plants again those of `events` the new image
    /// reports (a `stop` waiting through a wrapper's exec stops in the
    /// program it execs).
    void rearm(const image_events& events);
    /// The process exited: nothing is armed or planted any more.
    void forget_all()
    {
        armed_.reset();
        stop_events_.clear();
    }
    /// Detach (every thread held, settings back): every site goes.
    void remove_all_sites();

private:
    struct armed_state {
        std::vector<td_event_e> events;
        // A library that tells a new thread only through TD_CREATE
        // (thread_backend::must_follow_create): when watching other events,
        // create is armed too, to enable each new thread at its report, but
        // not shown.
        bool follow_create = false;
    };
    /// A message taken at a reporting address.
    struct drained {
        events::event_message message;
        /// For TD_CREATE read from the new thread's own record: that record.
        target_addr newborn;
        bool extras_read = false;   ///< the stack window came in full
        bool flag_changed = false;  ///< the consume's write changed the flag
    };

    bool is_watched(td_event_e event) const;
    td_status plant(const std::vector<td_event_e>& events);
    /// The signal the agent raises to stop at a report (chosen on first use:
    /// SIGURG, SIGWINCH or SIGCHLD, whichever the target does not catch), or
    /// 0 when its sites take trap bytes (nptl, an agent without stop flags,
    /// a target catching all three).
    int report_signal();
    void remove_sites(const std::vector<td_event_e>& events);
    /// Sets the global mask, enables every thread and the initial flag for arm().
    td_status enable_for_arm(const std::vector<td_event_e>& planted);
    /// Switches a thread's reporting on (journaled) while watching.
    void enable_thread(target_addr handle, std::optional<std::int32_t> record_tid = {});

    /// at_site()'s consume and everything that goes with it; `show`: the
    /// message is asked for and not silent.
    std::optional<events::event_message> take_report(td_event_e event, const ptrace::stop_event& ev, bool show);
    /// Consumes the message `reporter` announced from the record the
    /// backend names (or, when it names none, the head of the library's
    /// list). `regs`: the creator's trap registers, when its stack is to be
    /// read with the report for its call site.
    std::optional<drained> consume_report(td_event_e event, tid_t reporter, std::uint64_t arg0,
                                          const std::optional<ptrace::registers>& regs);
    /// What the consume of `subject`'s record also does in its one read and write.
    consume_extras extras_for(td_event_e event, tid_t reporter, const message_subject& subject) const;
    /// What a report's consume means for the new thread or the dying one.
    void after_report(td_event_e event, tid_t reporter, drained& d);
    /// The library's list, head first: a message whose record is not known.
    std::optional<drained> from_list(tid_t reporter);
    /// The one builder of a message, whatever its origin ("" = the library
    /// reported it). `data` starts as the handle (TD_CREATE/TD_DEATH carry one).
    static events::event_message message_of(td_event_e event, tid_t reporter, const message_subject& subject,
                                            std::string_view origin, std::optional<pid_t> ns_tid,
                                            std::string name);

    live_target& target_;
    report_changes& changes_;
    birth_policy& births_;
    event_stacks& stacks_;
    std::optional<armed_state> armed_;
    std::vector<td_event_e> stop_events_;
    // Reporting address -> event, for every site planted by arm() or plant_stops().
    std::unordered_map<target_addr, td_event_e> site_events_;
    // LWPs whose TD_DEATH came through the reporting address.
    std::unordered_set<tid_t> death_reported_;
    // CLOCK_MONOTONIC ns of each LWP's clone stop.
    std::unordered_map<tid_t, std::uint64_t> born_ns_;
    // The creator's stack from sp, read with the TD_CREATE report for its call site.
    std::array<std::byte, call_site_reader::stack_window> report_stack_{};
};

}  // namespace tdctl::core
