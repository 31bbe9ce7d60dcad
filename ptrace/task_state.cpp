#include "ptrace/task_state.hpp"

namespace tdctl::ptrace {

const char* task_state_name(task_state s)
{
    switch (s) {
    case task_state::running: return "running";
    case task_state::interrupting: return "interrupting";
    case task_state::vfork_blocked: return "vfork-blocked";
    case task_state::stopped: return "stopped";
    case task_state::trap_stopped: return "trap-stopped";
    case task_state::exit_stopped: return "exit-stopped";
    case task_state::exiting: return "exiting";
    }
    return "?";
}

task_state after_status(task_state before, const wait_status& ws)
{
    if (ws.has_ended())
        return task_state::exiting;
    // A task at or past its exit event never runs code of its own again,
    // whatever stop it reports.
    if (ws.kind() == wait_kind::exit_event || is_exiting(before))
        return task_state::exit_stopped;
    return task_state::stopped;
}

bool answers_interrupt(task_state before, const wait_status& ws)
{
    return ws.kind() == wait_kind::event_stop && is_interrupt_sent(before);
}

task_state after_resume(task_state before)
{
    switch (before) {
    case task_state::stopped:
    case task_state::trap_stopped: return task_state::running;
    case task_state::exit_stopped: return task_state::exiting;
    default: return before;
    }
}

task_state after_interrupt(task_state before)
{
    return before == task_state::running ? task_state::interrupting : before;
}

task_state after_vfork_found(task_state before)
{
    return is_running(before) ? task_state::vfork_blocked : before;
}

task_state after_trap_of_ours(task_state before)
{
    return before == task_state::stopped ? task_state::trap_stopped : before;
}

}  // namespace tdctl::ptrace
