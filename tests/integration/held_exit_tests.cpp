// Regression: the whole process is killed while tdctl holds its threads.
// The group's SIGKILL wakes each held thread from the stop tdctl recorded,
// and each stops again at its exit (PTRACE_EVENT_EXIT), waiting for tdctl.
// A leader tdctl then resumes (to finish a step-over, to swallow a trap's
// SIGTRAP) dies, and its end is not reported until every other thread has
// gone: a wait for the leader's next stop never ended.
//
// The tracer runs in a child process of its own, so that a hang is a failed
// check (the child killed after a bound), not a test that never ends.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "ptrace/traced_process.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::test;
using namespace std::chrono_literals;

namespace {

constexpr int sleeper_threads = 4;

// Every task of pid in a ptrace stop ('t'), or gone; false after 5 s.
bool all_in_trace_stop(pid_t pid)
{
    for (int tries = 0; tries < 500; ++tries) {
        bool all = true;
        for (pid_t tid : task_tids(pid))
            if (auto s = task_state(pid, tid); s && *s != 't')
                all = false;
        if (all)
            return true;
        std::this_thread::sleep_for(10ms);
    }
    return false;
}

// Runs `trace` in a child process and waits for it at most `bound`: its
// exit code (0: done), or -1 when it had to be killed.
template <typename Trace>
int run_tracer(Trace trace, std::chrono::milliseconds bound)
{
    pid_t tracer = ::fork();
    REQUIRE(tracer >= 0);
    if (tracer == 0) {
        // No test macros here: only an exit status.
        int code = 3;
        try {
            code = trace();
        } catch (...) {
        }
        ::_exit(code);
    }
    int raw = 0;
    for (auto waited = 0ms; waited < bound; waited += 10ms) {
        if (::waitpid(tracer, &raw, WNOHANG) == tracer)
            return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        std::this_thread::sleep_for(10ms);
    }
    ::kill(tracer, SIGKILL);
    ::waitpid(tracer, &raw, 0);
    return -1;
}

}  // namespace

TEST_SUITE("regressions")
{
    TEST_CASE("the process killed while held, its leader owing a trap's SIGTRAP or in a trap stop of ours: the detach ends")
    {
        // A leader that hit a site just as stop-all interrupted it owes the
        // trap's SIGTRAP (its hit came through the interrupt's stop): the
        // detach resumes it to swallow that signal. One in a trap stop of
        // ours is parked (interrupted and resumed) when the sites are
        // withdrawn, as before each remote call.
        require_ptrace();
        for (bool owes_sigtrap : {true, false}) {
            CAPTURE(owes_sigtrap);
            auto target = child_process::spawn({fixture_path("sleeper"), std::to_string(sleeper_threads)});
            const pid_t pid = target.pid();
            for (int tries = 0; tries < 500 && task_tids(pid).size() < sleeper_threads + 1; ++tries)
                std::this_thread::sleep_for(10ms);
            REQUIRE(task_tids(pid).size() == sleeper_threads + 1);

            int code = run_tracer(
                [pid, owes_sigtrap] {
                    auto process = ptrace::traced_process::attach(pid);  // held
                    ptrace::task* leader = process->tasks().find(tid_t{pid});
                    if (leader == nullptr)
                        return 4;
                    if (owes_sigtrap)
                        leader->sigtrap_owed = true;
                    else
                        leader->note_trap_of_ours();
                    ::kill(pid, SIGKILL);
                    if (!all_in_trace_stop(pid))
                        return 5;
                    if (!owes_sigtrap)
                        process->sites().withdraw_all();
                    process->detach();
                    return 0;
                },
                10s);
            CHECK_MESSAGE(code == 0, "tracer: ", code, " (-1: it never ended)");
            auto status = target.wait_exit(5s);
            REQUIRE(status.has_value());
            CHECK(status->term_signal() == SIGKILL);
        }
    }
}
