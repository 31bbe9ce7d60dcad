// The task state machine (ptrace/task_state.hpp, ptrace/task.hpp): every
// transition from every state, on statuses built by the kernel's encoding,
// no tracee.
#include <array>
#include <csignal>
#include <sys/ptrace.h>

#include <doctest/doctest.h>

#include "ptrace/task.hpp"
#include "ptrace/task_state.hpp"

using namespace tdctl;
using namespace tdctl::ptrace;

namespace {

using enum task_state;

constexpr std::array all_states{running, interrupting, vfork_blocked, stopped, trap_stopped, exit_stopped, exiting};

wait_status event_stop() { return wait_status::for_ptrace_event(PTRACE_EVENT_STOP, SIGTRAP); }
wait_status group_stop() { return wait_status::for_ptrace_event(PTRACE_EVENT_STOP, SIGSTOP); }
wait_status exit_event() { return wait_status::for_ptrace_event(PTRACE_EVENT_EXIT, SIGTRAP); }

}  // namespace

TEST_CASE("the predicates partition the states as the machinery reads them")
{
    for (task_state s : all_states) {
        CAPTURE(task_state_name(s));
        // Every state is exactly one of: running code (a stop to come),
        // blocked in vfork(), in a live stop, exiting.
        int kinds = is_running(s) + (s == vfork_blocked) + is_live_stop(s) + is_exiting(s);
        CHECK(kinds == 1);
        CHECK(is_stopped(s) == (is_live_stop(s) || s == exit_stopped));
    }
    CHECK(is_interrupt_sent(interrupting));
    CHECK(is_interrupt_sent(vfork_blocked));
    CHECK_FALSE(is_interrupt_sent(running));
    CHECK_FALSE(is_interrupt_sent(stopped));
    CHECK(std::string(task_state_name(trap_stopped)) == "trap-stopped");
}

TEST_CASE("a status: the end is exiting, the exit event exit_stopped, any other stop stopped")
{
    const std::array stops{event_stop(),
                           group_stop(),
                           wait_status::for_signal_stop(SIGUSR1),
                           wait_status::for_signal_stop(SIGTRAP),
                           wait_status::for_ptrace_event(PTRACE_EVENT_CLONE, SIGTRAP),
                           wait_status::for_ptrace_event(PTRACE_EVENT_FORK, SIGTRAP),
                           wait_status::for_ptrace_event(PTRACE_EVENT_VFORK, SIGTRAP),
                           wait_status::for_ptrace_event(PTRACE_EVENT_VFORK_DONE, SIGTRAP),
                           wait_status::for_ptrace_event(PTRACE_EVENT_EXEC, SIGTRAP)};
    for (task_state before : all_states) {
        CAPTURE(task_state_name(before));
        CHECK(after_status(before, wait_status::for_exit(0)) == exiting);
        CHECK(after_status(before, wait_status::for_kill(SIGKILL)) == exiting);
        CHECK(after_status(before, exit_event()) == exit_stopped);
        for (const wait_status& ws : stops) {
            CAPTURE(ws.to_string());
            // Past its exit event a task never runs code of its own again.
            CHECK(after_status(before, ws) == (is_exiting(before) ? exit_stopped : stopped));
        }
    }
}

TEST_CASE("only a PTRACE_EVENT_STOP after an interrupt of ours answers it")
{
    for (task_state before : all_states) {
        CAPTURE(task_state_name(before));
        CHECK(answers_interrupt(before, event_stop()) == (before == interrupting || before == vfork_blocked));
        CHECK_FALSE(answers_interrupt(before, group_stop()));
        CHECK_FALSE(answers_interrupt(before, wait_status::for_signal_stop(SIGTRAP)));
        CHECK_FALSE(answers_interrupt(before, exit_event()));
    }
}

TEST_CASE("resume, interrupt, vfork found, SIGTRAP of ours: each moves only the states it names")
{
    for (task_state before : all_states) {
        CAPTURE(task_state_name(before));
        task_state resumed = before == stopped || before == trap_stopped ? running
                             : before == exit_stopped                   ? exiting
                                                                         : before;
        CHECK(after_resume(before) == resumed);
        CHECK(after_interrupt(before) == (before == running ? interrupting : before));
        CHECK(after_vfork_found(before) == (is_running(before) ? vfork_blocked : before));
        CHECK(after_trap_of_ours(before) == (before == stopped ? trap_stopped : before));
    }
}

TEST_CASE("a task's life: interrupted, stopped, hit, resumed, killed, reaped")
{
    task t(tid_t{42}, running);
    CHECK_FALSE(t.is_stopped());

    t.note_interrupt_sent();
    CHECK(t.state() == interrupting);
    CHECK(t.note_status(event_stop()));  // our interrupt's stop
    CHECK(t.state() == stopped);
    CHECK(t.is_stopped());

    t.note_resumed();
    CHECK(t.state() == running);
    CHECK_FALSE(t.note_status(event_stop()));  // a LISTENing task going on, not our interrupt
    t.note_resumed();

    t.note_status(wait_status::for_signal_stop(SIGTRAP));
    t.note_trap_of_ours();
    CHECK(t.state() == trap_stopped);
    t.note_resumed();

    t.note_interrupt_sent();
    t.note_vfork_blocked();
    CHECK(t.state() == vfork_blocked);
    CHECK(t.note_status(event_stop()));  // its child exec'd: the interrupt's stop comes
    CHECK(t.state() == stopped);
    t.note_resumed();

    t.note_status(exit_event());
    CHECK(t.state() == exit_stopped);
    CHECK(t.is_stopped());
    CHECK(t.is_exiting());
    t.note_resumed();
    CHECK(t.state() == exiting);
    CHECK_FALSE(t.is_stopped());
    t.note_status(wait_status::for_exit(0));
    CHECK(t.state() == exiting);
}

TEST_CASE("a kept signal is counted; a task gone is exiting from any state")
{
    for (task_state s : all_states) {
        task t(tid_t{7}, s);
        t.keep_signal(SIGUSR1);
        CHECK(t.pending_signal == SIGUSR1);
        CHECK(t.signals_received() == 1);
        t.note_gone();
        CHECK(t.state() == exiting);
    }
}
