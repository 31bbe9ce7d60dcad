// Events without a stop: while a `watch --stream` runs on a target with the
// agent, each armed event is written to its thread's ring in the agent
// (agent/event_rings.c) and tdctl drains the rings as the target runs
// (core/protocol/event_rings.hpp); the reporting thread never stops.
//
// Streaming is switched on by two journaled writes into the agent — the
// event mask __tdagent_stream_events and the flag __tdagent_streaming,
// which makes every thread stream, born before or during the watch, with no
// per-thread flag — so detach, disarm and the guardian (a SIGKILLed tdctl)
// put it back like every other change: no per-thread state is left. A
// report a ring cannot take (full, no free ring) falls back to the agent's
// usual report, which the watch keeps armed, so nothing is lost.
//
// When nothing else needs a thread's birth to stop it (no trap byte planted,
// every stop flag's event streamed, no statistics gathered at clone stops)
// and the agent knows how, the threads born while streaming are left
// untraced (ptrace/birth_tracing.hpp): no clone stop, no exit stop, native
// cost. The agent is told with a third bit of the flag: a report a ring
// cannot take then waits for room instead of stopping (an untraced thread
// has nobody to stop for). stop() seizes them and traces births again.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <thread_db.h>

#include "core/protocol/event_rings.hpp"
#include "core/session/live_target.hpp"
#include "core/session/ring_waker.hpp"
#include "core/stacks/event_stacks.hpp"
#include "events/event_message.hpp"

namespace tdctl::core {

class event_stream {
public:
    /// How long an LWP had lived at a time (CLOCK_MONOTONIC ns), ns
    /// (event_watch::lifetime_of), for each streamed TD_DEATH at its ring time.
    using lifetime_source = std::function<std::optional<std::uint64_t>(tid_t, std::uint64_t)>;
    /// `stacks` names the call site of a streamed lock wait (decorate_streamed).
    /// `births_counted`: some part counts each birth and death at its
    /// stops now (statistics): births then stay traced.
    event_stream(live_target& target, event_stacks& stacks, lifetime_source lifetime_of,
                 std::function<bool()> births_counted)
        : target_(target), stacks_(stacks), lifetime_of_(std::move(lifetime_of)),
          births_counted_(std::move(births_counted))
    {
    }
    ~event_stream();
    event_stream(const event_stream&) = delete;
    event_stream& operator=(const event_stream&) = delete;

    /// Why the target cannot stream (no agent, an agent without rings), or
    /// empty when it can.
    std::string unavailable_reason();
    /// What a thread does with an event its full ring cannot take.
    enum class full_ring {
        report,  ///< reports it with a stop, as without streaming (lossless)
        drop,    ///< counts it in the ring's drop counter (losses())
    };
    /// Streams `events` from now on (journaled writes, change_kind::
    /// global_mask: a disarm's restore puts them back too). What the rings
    /// hold from a session before this one is discarded. False, with
    /// unavailable_reason(), when the target cannot.
    bool start(const std::vector<td_event_e>& events, full_ring when_full = full_ring::report);
    bool is_active() const { return active_; }
    /// `event` is streamed now (as the watch asked: a TD_CREATE streamed
    /// only to know births, see begin(), is not).
    bool streams(td_event_e event) const { return active_ && td_eventismember(&streamed_, event); }
    /// At `lwp`'s exit stop: whether a TD_DEATH of it came from the rings
    /// (forgotten here); its birth is forgotten too (the exit stop's own
    /// TD_DEATH, if any, is the caller's).
    bool took_death_of(tid_t lwp)
    {
        born_.erase(lwp.value);
        return deaths_.erase(lwp.value) > 0;
    }
    /// The process ended, or exec'd from `except`: a TD_DEATH for each
    /// thread whose streamed TD_CREATE has no TD_DEATH after it (one born
    /// untraced, killed by the exit or the exec, never reaches its own
    /// report and has no exit stop), with `origin` ("lwp-exit", "exec");
    /// only while TD_DEATH is streamed. The births are forgotten.
    std::vector<events::event_message> deaths_unseen(std::string_view origin, tid_t except = {});
    /// Puts the agent's streaming flag and mask back to 0 (journaled) when a
    /// session killed together with its guardian left them set, unless this
    /// session streams. Called at each arm.
    void clear_left_over();
    /// The process exec'd from thread `execer` (its former TID): what the
    /// old image's rings still hold (all of it, oldest first: written before
    /// the exec) and deaths_unseen() but the execer's, then its region is
    /// forgotten (the journal forgets its writes); streaming pauses until
    /// restart_after_exec().
    std::vector<events::event_message> leave_image(tid_t execer);
    /// After an exec (once the new image's symbols are read): streams again
    /// what was streamed before it, as start() did, when the new image has
    /// the agent (an LD_PRELOAD the exec kept carries it over). False when
    /// nothing was streamed or the new image cannot stream; the watch's
    /// reports then stop their threads. Drops counted before are kept.
    bool restart_after_exec();
    /// The messages the rings hold now, stamped before this call, oldest
    /// first (the target's clock): an event's causes come in this drain or
    /// an earlier one (a thread's TD_DEATH after its creator's TD_CREATE);
    /// maps the agent's region once it appears (the first streamed event
    /// makes it); each TD_DEATH with its lifetime. Nothing while not active.
    std::vector<events::event_message> drain();
    /// Threads born while streaming are left untraced (see above).
    bool leaves_births_untraced() const { return births_untraced_; }
    /// Seizes the threads born untraced that asked for it before an exec
    /// (the agent's exec wrappers: the region's seize requests) with a hold,
    /// which seizes every thread born untraced. The pump's, after its drain.
    void seize_if_asked();
    /// Ends streaming: the threads born untraced seized and births traced
    /// again (a hold), the two writes put back, then what the rings still
    /// hold drained and returned.
    std::vector<events::event_message> stop();
    /// Events dropped at a full ring (full_ring::drop), per thread: the
    /// drops the drains found since start(), by LWP (a thread that ended
    /// keeps its TID as LWP), in order of the LWP.
    struct loss {
        tid_t lwp;
        std::uint64_t count = 0;
    };
    std::vector<loss> losses() const;
    /// The longest a pump may wait before the next drain while streaming,
    /// ms: halved after a drain that found a ring half full or more (down to
    /// min_drain_interval_ms), doubled after one that found every ring less
    /// than a quarter full (up to max_drain_interval_ms: an idle target
    /// costs tdctl a wake-up every 50 ms, and the agent's heartbeat stays far
    /// younger than its second); so a steady stream is drained at a quarter
    /// to a half of a ring, with as few wake-ups as that allows. A burst that
    /// fills a ring to half between two drains wakes the wait at once
    /// (ring_waker).
    int drain_interval_ms() const { return interval_ms_; }
    static constexpr int min_drain_interval_ms = 2;
    static constexpr int max_drain_interval_ms = 50;
    /// The interval after `interval_ms` when the last drain's fullest ring
    /// was `fullest` full (0 to 1): the rule drain_interval_ms() follows.
    static int next_drain_interval_ms(int interval_ms, double fullest);

private:
    /// Maps the region the agent made (through /proc/PID/fd/N), once:
    /// not_yet while no thread has made it, never when its descriptor is
    /// not the agent's memfd any more.
    enum class mapped { yes, not_yet, never };
    mapped map_region();
    /// start() without forgetting the drops counted so far.
    bool begin(const td_thr_events_t& mask, full_ring when_full);
    /// Whether births may be left untraced while `mask` streams: the agent
    /// knows a waiting stream (_tdagent_db_stream_bits), no site is a trap
    /// byte, each signal-stop site reports an event of `mask`, and no part
    /// counts births (births_counted_).
    bool may_leave_births_untraced(const td_thr_events_t& mask);
    /// Starts the ring_waker on the mapped region's wake word while a
    /// stream is active (once).
    void start_waker();
    /// Journals `value` at `address` with `natural` as its original (used
    /// the first time the address is seen), then writes it.
    bool write_journaled(target_addr address, std::span<const std::byte> natural, std::span<const std::byte> value);
    /// Sets the next drain_interval_ms() after a drain whose fullest ring
    /// was `fullest` full (0 to 1; 0 when no region is mapped yet).
    void adapt_interval(double fullest);
    /// What the mapped region holds now, stamped before `cut_ns`
    /// (ring_region::drain_all), as messages.
    std::vector<events::event_message> drain_rings(std::uint64_t cut_ns);
    /// The comm of each thread met in one drain, by LWP.
    using names_in_drain = std::unordered_map<pid_t, std::string>;
    events::event_message message_of(const ring_event& e, names_in_drain& names);
    /// The LWP of `tid` (the target's PID namespace); a thread that ended
    /// keeps its TID; none for 0 or an ended thread in another namespace.
    tid_t lwp_of(pid_t tid);

    live_target& target_;
    event_stacks& stacks_;
    lifetime_source lifetime_of_;
    std::function<bool()> births_counted_;
    bool active_ = false;
    bool births_untraced_ = false;
    // Each thread whose streamed TD_CREATE came and its TD_DEATH not yet,
    // by LWP: for its lifetime (a thread born untraced has ended before
    // /proc is read) and for the deaths no report and no stop will tell.
    struct birth {
        std::uint64_t at_ns = 0;  // ring time of its TD_CREATE
        target_addr handle;
        std::string name;
    };
    std::unordered_map<pid_t, birth> born_;
    std::optional<ring_layout> layout_;
    std::span<std::byte> mapping_;
    std::optional<ring_region> region_;
    // Asleep on the region's wake word while streaming (after region_:
    // destroyed first, and before the mapping goes).
    std::unique_ptr<ring_waker> waker_;
    target_addr mask_address_;
    target_addr flag_address_;
    td_thr_events_t streamed_{};
    full_ring when_full_ = full_ring::report;
    // What leave_image() found streamed, for restart_after_exec().
    std::optional<std::pair<td_thr_events_t, full_ring>> after_exec_;
    int interval_ms_ = min_drain_interval_ms;
    // Subjects (LWPs) of TD_DEATH messages drained and not asked about yet.
    std::unordered_set<pid_t> deaths_;
    // Drops found by the drains since start(), by LWP.
    std::map<pid_t, std::uint64_t> lost_;
};

}  // namespace tdctl::core
