// wait_status decoding on statuses built by the kernel's encoding, no tracee.
#include <csignal>
#include <sys/ptrace.h>

#include <doctest/doctest.h>

#include "ptrace/wait_status.hpp"

using namespace tdctl::ptrace;

TEST_CASE("exit and kill statuses")
{
    auto e = wait_status::for_exit(3);
    CHECK(e.kind() == wait_kind::exited);
    CHECK(e.exit_code() == 3);
    CHECK_FALSE(e.is_stop());
    CHECK(e.to_string() == "exited 3");

    auto k = wait_status::for_kill(SIGSEGV);
    CHECK(k.kind() == wait_kind::killed);
    CHECK(k.signal() == SIGSEGV);
    CHECK(k.to_string() == "killed SIGSEGV");
}

TEST_CASE("signal-delivery-stop")
{
    auto s = wait_status::for_signal_stop(SIGUSR1);
    CHECK(s.kind() == wait_kind::signal_stop);
    CHECK(s.signal() == SIGUSR1);
    CHECK(s.is_stop());
}

TEST_CASE("PTRACE_EVENT_STOP: group-stop for stopping signals, event-stop for SIGTRAP")
{
    for (int sig : {SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU}) {
        auto s = wait_status::for_ptrace_event(PTRACE_EVENT_STOP, sig);
        CHECK(s.kind() == wait_kind::group_stop);
        CHECK(s.signal() == sig);
    }
    CHECK(wait_status::for_ptrace_event(PTRACE_EVENT_STOP, SIGTRAP).kind() == wait_kind::event_stop);
}

TEST_CASE("ptrace events")
{
    CHECK(wait_status::for_ptrace_event(PTRACE_EVENT_CLONE, SIGTRAP).kind() == wait_kind::clone_event);
    CHECK(wait_status::for_ptrace_event(PTRACE_EVENT_FORK, SIGTRAP).kind() == wait_kind::fork_event);
    CHECK(wait_status::for_ptrace_event(PTRACE_EVENT_VFORK, SIGTRAP).kind() == wait_kind::vfork_event);
    CHECK(wait_status::for_ptrace_event(PTRACE_EVENT_VFORK_DONE, SIGTRAP).kind() == wait_kind::vfork_done);
    CHECK(wait_status::for_ptrace_event(PTRACE_EVENT_EXEC, SIGTRAP).kind() == wait_kind::exec_event);
    CHECK(wait_status::for_ptrace_event(PTRACE_EVENT_EXIT, SIGTRAP).kind() == wait_kind::exit_event);
    CHECK(wait_status::for_signal_stop(SIGTRAP | 0x80).kind() == wait_kind::syscall_stop);
}

TEST_CASE("signal names")
{
    CHECK(signal_name(SIGKILL) == "SIGKILL");
    CHECK(signal_name(SIGUSR1) == "SIGUSR1");
    CHECK(signal_name(SIGRTMIN) == "SIGRTMIN");
    CHECK(signal_name(SIGRTMIN + 3) == "SIGRTMIN+3");
}
