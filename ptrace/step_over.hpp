// Moving a task that trapped on one of our sites past it (its step-over),
// as the site's step_over_kind says: run the `ret` the patch holds in
// place, emulate that return, or single-step the original instruction with
// the site's bytes lifted and every other task held. Also the moves that
// hold and detach need: finishing every thread's step-over on a site about
// to go, swallowing a trap's owed SIGTRAP, and parking a task in a stop
// that carries no signal of ours.
#pragma once

#include <deque>
#include <optional>

#include "ptrace/process_memory.hpp"
#include "ptrace/site_table.hpp"
#include "ptrace/stop_event.hpp"
#include "ptrace/stop_router.hpp"
#include "ptrace/task_table.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::ptrace {

class stepper {
public:
    /// Parts of the traced process `pid`, all owned by it and outliving
    /// this. `queue` takes the end of a task that vanished during a step
    /// (reported from there, traced_process::next_event()).
    stepper(pid_t pid, task_table& tasks, site_table& sites, process_memory& memory, waiter& wait,
            std::deque<stop_event>& queue, stop_router& router);

    /// Moves t, stopped on its hit's site (task::hit), past the site as its
    /// step-over kind says, and clears the hit. The caller restarts t.
    void step_over(task& t);
    /// A thread stopped on `site` (about to lose its bytes) has its
    /// step-over finished; one resumed in place and standing on the patch's
    /// own `ret` performs that return here (that byte is padding again once
    /// the original bytes are back).
    void clear_threads_from(const breakpoint_site& site);
    /// Before detach: clear_threads_from() every site and swallows every
    /// owed SIGTRAP, so a detached thread meets neither.
    void clear_all_sites();
    /// Restarts t from a stop on a hit reported through an interrupt first,
    /// so that the trap's queued SIGTRAP is dequeued (and dropped) before
    /// any instruction runs; t stops again at once. No-op when none is owed.
    void consume_owed_sigtrap(task& t);
    /// Every stopped task whose stop carries a SIGTRAP of ours (a trap stop,
    /// an owed SIGTRAP) is parked (park()).
    void park_trap_stops();
    /// Moves t out of a SIGTRAP stop of ours into a PTRACE_EVENT_STOP at the
    /// same place, its hit's step-over done first (a task on a single-step
    /// site stays as it is): were the tracer to die now, the kernel would let
    /// t go with nothing of ours pending.
    void park(task& t);
    /// The next status of t, just restarted (waitpid by TID): a stop, or
    /// std::nullopt when t has gone (its end queued for the owner) or is a
    /// leader that died when resumed (wait_resumed()).
    std::optional<wait_status> next_stop_of(task& t);

private:
    void step_over_single(task& t, breakpoint_site& site);
    /// Single-steps t once (the site's bytes lifted), keeping any signal
    /// that comes first for t's restart.
    void single_step_once(task& t);
    /// Performs the `ret` t trapped on (the emulated return).
    void return_from_trap(task& t);
    /// The step-over of t's hit, its owed SIGTRAP swallowed first; no-op when the
    /// hit's site is gone.
    void finish_step_over(task& t);
    void note_vanished(task& t, wait_status ws);
    /// waitpid() by TID for t, just resumed; for the leader, looks and sleeps
    /// instead of blocking, and std::nullopt once it is found dead (a zombie:
    /// its end comes after every other thread's). std::nullopt also when t is
    /// no child of ours.
    std::optional<wait_status> wait_resumed(task& t);

    pid_t pid_;
    task_table& tasks_;
    site_table& sites_;
    process_memory& memory_;
    waiter& waiter_;
    std::deque<stop_event>& queue_;
    stop_router& router_;
};

}  // namespace tdctl::ptrace
