// The run state of one traced task, and how each thing that happens to it
// moves the state: a status from the wait, a restart, an interrupt, a
// SIGTRAP found to be ours, a vfork() found blocking it. Pure functions of
// (state, what happened), so the machine is tested without a tracee.
#pragma once

#include "ptrace/wait_status.hpp"

namespace tdctl::ptrace {

enum class task_state {
    running,        ///< restarted by tdctl (or running when seized): its next stop comes when it comes
    interrupting,   ///< PTRACE_INTERRUPT sent, the stop it asks for not seen yet
    vfork_blocked,  ///< interrupted while blocked in vfork(): stops only once its child execs or exits
    stopped,        ///< in a ptrace-stop: an event-stop, a group-stop, a signal-delivery-stop of a
                    ///< signal not ours
    trap_stopped,   ///< in the signal-delivery-stop of a SIGTRAP of ours (a hit, a single step,
                    ///< run_to's arrival): let go by a dying tracer, it would take that SIGTRAP
    exit_stopped,   ///< at PTRACE_EVENT_EXIT: still readable; never runs code of its own again
    exiting,        ///< past PTRACE_EVENT_EXIT, gone, or no longer ours: no stop is to come
};

/// "running", "interrupting", "vfork-blocked", "stopped", "trap-stopped", "exit-stopped", "exiting".
const char* task_state_name(task_state s);

/// In a ptrace-stop now (stopped, trap_stopped, exit_stopped).
constexpr bool is_stopped(task_state s)
{
    return s == task_state::stopped || s == task_state::trap_stopped || s == task_state::exit_stopped;
}
/// At or past PTRACE_EVENT_EXIT.
constexpr bool is_exiting(task_state s)
{
    return s == task_state::exit_stopped || s == task_state::exiting;
}
/// In a stop it leaves to run code of its own (stopped, trap_stopped): one
/// that can be stepped, parked, run alone or called into.
constexpr bool is_live_stop(task_state s)
{
    return s == task_state::stopped || s == task_state::trap_stopped;
}
/// Running code of its own with a stop to come (running, interrupting): what
/// a stop-all waits for.
constexpr bool is_running(task_state s)
{
    return s == task_state::running || s == task_state::interrupting;
}
/// A PTRACE_INTERRUPT of ours is still to be answered (interrupting, vfork_blocked).
constexpr bool is_interrupt_sent(task_state s)
{
    return s == task_state::interrupting || s == task_state::vfork_blocked;
}

/// A status the wait gave for the task: exiting when it ended; exit_stopped
/// at PTRACE_EVENT_EXIT, and at any stop once at or past it; stopped at
/// every other stop (whether the stop is a SIGTRAP of ours is decided later:
/// after_trap_of_ours).
task_state after_status(task_state before, const wait_status& ws);
/// Whether a status answers a PTRACE_INTERRUPT of ours: a PTRACE_EVENT_STOP
/// while one was sent. Any other PTRACE_EVENT_STOP is a LISTENing task's
/// group-stop ending.
bool answers_interrupt(task_state before, const wait_status& ws);
/// Out of its stop, restarted by tdctl or woken by SIGKILL: running, or
/// exiting from exit_stopped. A task not stopped stays as it is.
task_state after_resume(task_state before);
/// PTRACE_INTERRUPT sent: a running task is interrupting; others stay.
task_state after_interrupt(task_state before);
/// Found blocked in vfork() while its stop is awaited: vfork_blocked from
/// running or interrupting; others stay.
task_state after_vfork_found(task_state before);
/// The signal of its signal-delivery-stop is a SIGTRAP of ours:
/// trap_stopped from stopped; others stay.
task_state after_trap_of_ours(task_state before);

}  // namespace tdctl::ptrace
