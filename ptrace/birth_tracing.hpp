// Whether a thread born in the traced process is traced from its birth.
//
// By default every task is seized with PTRACE_O_TRACECLONE: a new thread
// starts traced and stopped, and its creator stops at its clone event — two
// stops per birth, and one more at each exit. While events stream through
// the agent's rings (core/session/event_stream.hpp) nothing needs those
// stops, so the tasks' options can leave PTRACE_O_TRACECLONE out: threads
// born meanwhile run untraced, at native cost. They are strangers to the
// task table, so while births are untraced every hold (stop-all) also seizes
// the threads /proc/PID/task lists that are not ours, until a pass finds
// none: a hold still holds every thread, as attach proves it does. Tracing
// births again needs a hold: each task's options are set back.
#pragma once

#include <functional>
#include <set>
#include <vector>

#include "base/types.hpp"
#include "ptrace/task_births.hpp"
#include "ptrace/task_table.hpp"

namespace tdctl::ptrace {

class birth_tracing {
public:
    /// For the traced process `pid`, whose records are `tasks`; `births`
    /// knows the clone children met before their parent's event.
    birth_tracing(pid_t pid, task_table& tasks, const task_births& births)
        : pid_(pid), tasks_(tasks), births_(births)
    {
    }

    /// The ptrace options a task is seized with now: trace_options, without
    /// PTRACE_O_TRACECLONE while births are left untraced.
    long options() const;
    /// Births are left untraced, or some task still has the options that
    /// leave them so (it was not stopped when they were set back).
    bool leaves_births_untraced() const { return untraced_ || !stale_.empty(); }

    /// With every task held: PTRACE_SETOPTIONS without PTRACE_O_TRACECLONE
    /// on each. False, with every option put back, when a task is not in a
    /// ptrace-stop (blocked in vfork, say): births stay traced.
    bool leave_untraced();
    /// With every task held: PTRACE_SETOPTIONS with trace_options on each;
    /// a task that refuses (not in a ptrace-stop) is set at a later hold
    /// (set_stale()), and until then holds go on seizing strangers.
    void trace_again();
    /// After an exec: the lone exec'ing task (stopped at its exec event)
    /// traces births again; the tasks that had other options are gone.
    void after_exec(tid_t leader);

    /// Seizes each of `tids` that is not ours yet (nor a clone child met
    /// early) and adds it to the table, each seize bounded (seize_bound).
    /// Throws as seize_task().
    void seize(const std::vector<tid_t>& tids);
    /// With every known task stopped: seizes the threads of /proc/PID/task
    /// that are not ours (born untraced, or of a parent seized during its
    /// clone) and stops them with `stop_seized`, until a pass finds none,
    /// which proves every thread is ours and stopped; each one's thread
    /// pointer is read as at a clone stop. Also sets the options
    /// of stale tasks. Throws tdctl::error (target) after 1,000 passes (a
    /// process that makes threads faster than they can be seized), and as
    /// seize_task() and `stop_seized`.
    void seize_strangers(const std::function<void()>& stop_seized);

private:
    /// Sets trace_options on each stale task that is stopped now.
    void set_stale();

    pid_t pid_;
    task_table& tasks_;
    const task_births& births_;
    bool untraced_ = false;
    // Tasks whose options still leave births untraced after trace_again().
    std::set<tid_t> stale_;
};

}  // namespace tdctl::ptrace
