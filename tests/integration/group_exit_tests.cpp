// Regression: a process that ends (exit, SIGKILL, exec from a thread) while
// its threads keep creating threads. New clones whose parent died before
// reporting them stop at their exit; tdctl used to keep them there, so the
// group's exit (or the exec's wait for the other threads) never finished and
// tdctl waited forever with the target a zombie.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

constexpr int rounds = 4;

// tdctl must end by itself, well before this.
constexpr milliseconds tdctl_bound{30000};

}  // namespace

TEST_SUITE("regressions")
{
    TEST_CASE("exit() while threads create threads: attached tdctl reports the exit and ends")
    {
        require_attach();
        for (int round = 0; round < rounds; ++round) {
            INFO("round ", round);
            auto target = child_process::spawn({GROUP_EXIT_TARGET, "exit", "1"});
            REQUIRE(target.require_line(10s) == "ready");
            auto tdctl = child_process::spawn({tdctl_path(), "-p", std::to_string(target.pid()), "-e", "sleep 100"});
            auto tdctl_status = tdctl.wait_exit(tdctl_bound);
            REQUIRE_MESSAGE(tdctl_status.has_value(), "tdctl hung; stderr: ", tdctl.stderr_text());
            CHECK_MESSAGE(tdctl_status->is_success(), tdctl_status->describe(), "; stderr: ", tdctl.stderr_text());
            auto status = target.require_exit(10s);
            CHECK_MESSAGE(status.exit_code() == 7, status.describe());
        }
    }

    TEST_CASE("exit() while threads create threads: launched, the exit status is tdctl's")
    {
        require_ptrace();
        for (int round = 0; round < rounds; ++round) {
            INFO("round ", round);
            auto tdctl = child_process::spawn({tdctl_path(), "--", GROUP_EXIT_TARGET, "exit", "1"});
            auto status = tdctl.wait_exit(tdctl_bound);
            REQUIRE_MESSAGE(status.has_value(), "tdctl hung; stderr: ", tdctl.stderr_text());
            CHECK_MESSAGE(status->exit_code() == 7, status->describe(), "; stderr: ", tdctl.stderr_text());
        }
    }

    TEST_CASE("exec from a thread while others create threads: launched, sh's exit status is tdctl's")
    {
        require_ptrace();
        for (int round = 0; round < rounds; ++round) {
            INFO("round ", round);
            auto tdctl = child_process::spawn({tdctl_path(), "--", GROUP_EXIT_TARGET, "exec", "0.5"});
            auto status = tdctl.wait_exit(tdctl_bound);
            REQUIRE_MESSAGE(status.has_value(), "tdctl hung; stderr: ", tdctl.stderr_text());
            CHECK_MESSAGE(status->exit_code() == 5, status->describe(), "; stderr: ", tdctl.stderr_text());
        }
    }

    TEST_CASE("exec from a thread while others create threads, tdctl short of CPU: 100 launches, none hangs")
    {
        // Regression: a clone event whose parent the exec killed before tdctl
        // read the new TID (PTRACE_GETEVENTMSG failed) was taken as "TID 0",
        // and waitpid(0) took another thread's exit stop, never resumed: the
        // exec waited for that thread forever. The window is tdctl being
        // descheduled between the wait and the read, so two busy loops
        // compete with it for the CPU (1 hang in ~30 launches before the fix).
        require_ptrace();
        std::vector<child_process> hogs;
        for (int i = 0; i < 2; ++i)
            hogs.push_back(child_process::spawn({"/bin/sh", "-c", "while :; do :; done"}));
        for (int round = 0; round < 100; ++round) {
            INFO("round ", round);
            auto tdctl = child_process::spawn({tdctl_path(), "--", GROUP_EXIT_TARGET, "exec", "0.1"});
            auto status = tdctl.wait_exit(tdctl_bound);
            REQUIRE_MESSAGE(status.has_value(), "tdctl hung; stderr: ", tdctl.stderr_text());
            REQUIRE_MESSAGE(status->exit_code() == 5, status->describe(), "; stderr: ", tdctl.stderr_text());
        }
    }

    TEST_CASE("SIGKILL of a target that creates threads mid-watch: tdctl reports it and ends")
    {
        require_attach();
        for (int round = 0; round < rounds; ++round) {
            INFO("round ", round);
            auto target = child_process::spawn({GROUP_EXIT_TARGET, "exit", "60"});
            REQUIRE(target.require_line(10s) == "ready");
            auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(target.pid()), "-e",
                                               "watch --count 100000000"});
            REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
            std::this_thread::sleep_for(300ms);
            REQUIRE(target.send_signal(SIGKILL));
            auto tdctl_status = tdctl.wait_exit(tdctl_bound);
            REQUIRE_MESSAGE(tdctl_status.has_value(), "tdctl hung; stderr: ", tdctl.stderr_text());
            CHECK(tdctl_status->is_success());
            CHECK(target.require_exit(10s).term_signal() == SIGKILL);
        }
    }

    TEST_CASE("the process exits while the detach lets its threads go: launched, 100 rounds, none left at its exit stop")
    {
        // A thread let go first calls exit(): the group exit's SIGKILL wakes
        // the threads not let go yet out of their stops, their PTRACE_DETACH
        // fails (ESRCH), and each then stops at its exit (PTRACE_EVENT_EXIT),
        // still traced. An attached target is freed when tdctl exits; a
        // launched one is waited for, and tdctl waited for ever with the
        // leader a zombie (a launched `node -e 0` hung so, 4 runs in 100 on
        // a loaded host; this target 9 runs in 10). The spinner, the first
        // thread, exits as soon as it runs after the hold.
        require_ptrace();
        int exited_in_detach = 0;
        for (int round = 0; round < 100; ++round) {
            INFO("round ", round);
            auto tdctl = child_process::spawn({tdctl_path(), "--debug", "-e", "sleep 0.05", "-e", "interrupt", "-e",
                                               "bt all", "--", GROUP_EXIT_TARGET, "held-exit", "30"});
            auto status = tdctl.wait_exit(tdctl_bound);
            std::string err = tdctl.stderr_text();
            REQUIRE_MESSAGE(status.has_value(), "tdctl hung; its last lines: ", err.substr(err.size() - std::min<std::size_t>(err.size(), 3000)));
            CHECK_MESSAGE(status->exit_code() == 7, status->describe());
            std::istringstream lines(err);
            for (std::string line; std::getline(lines, line);)
                if (line.find("PTRACE_DETACH(") != std::string::npos && line.find("errno 3") != std::string::npos) {
                    ++exited_in_detach;
                    break;
                }
        }
        MESSAGE(exited_in_detach, " of 100 rounds had a thread killed during the detach");
    }

    TEST_CASE("a creator run alone at the end of a watch execs: launched, 100 rounds, none hangs")
    {
        // At a watch's end (and at detach) a creator seen at its clone stop
        // runs alone, the others held, for up to 20 ms, to its report. One
        // that execs then waits in execve for the others, which its SIGKILL
        // sends to their exit stops, where they wait for tdctl: tdctl's
        // interrupt could not stop it, and a waitpid() for it alone waited
        // for ever (1 run in 3 here). The creator execs as soon as a
        // heartbeat thread stands still after a creation.
        require_ptrace();
        int exec_while_stopping = 0;
        for (int round = 0; round < 100; ++round) {
            INFO("round ", round);
            auto tdctl = child_process::spawn(
                {tdctl_path(), "--debug", "-e", "watch --for 0.2", "--", GROUP_EXIT_TARGET, "create-exec", "30"});
            auto status = tdctl.wait_exit(tdctl_bound);
            std::string err = tdctl.stderr_text();
            REQUIRE_MESSAGE(status.has_value(), "tdctl hung; its last lines: ",
                            err.substr(err.size() - std::min<std::size_t>(err.size(), 3000)));
            CHECK_MESSAGE(status->exit_code() == 5, status->describe());
            if (err.find("is in an exec") != std::string::npos)
                ++exec_while_stopping;
        }
        MESSAGE(exec_while_stopping, " of 100 rounds met the exec while stopping the creator");
    }

    TEST_CASE("a launched program whose main thread called pthread_exit: the detach does not wait for that zombie")
    {
        // The leader, past its exit, can be reaped only after the threads
        // the detach has just let go: the detach waited for it in vain, 1 s
        // each time. Timed against the same session on the same program
        // with its main thread waiting instead, so a slow host slows both.
        require_ptrace();
        auto detached_at = [](const char* mode) {
            auto run = run_tdctl({"--json", "-e", "sleep 0.2", "-e", "detach", "--", GROUP_EXIT_TARGET, mode, "3"}, 30s);
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 7);
            auto detached = run.of_type("detached");
            REQUIRE(detached.size() == 1);
            return detached[0]["time"].get<double>();
        };
        double slowest_extra = 0;
        for (int round = 0; round < 3; ++round) {
            double waits = detached_at("leader-waits");
            double exited = detached_at("leader-exit");
            MESSAGE("detached at ", exited, " s with main gone, at ", waits, " s with main waiting");
            slowest_extra = std::max(slowest_extra, exited - waits);
        }
        CHECK(slowest_extra < 0.5);
    }

    TEST_CASE("the whole process exits as tdctl watches or detaches: 100 rounds, tdctl ends soon after, none waits")
    {
        // exit() from a thread kills the leader with SIGKILL, so the leader
        // makes no exit stop, and the kernel keeps the leader's status until
        // every other thread is reaped. A thread held in its own exit stop by
        // the detach's stop-all then kept the leader from ever reporting: "1
        // tasks did not stop within 10 s", and changes "not put back" (1 run
        // in 20 waited 3 x 10 s). A task that is exiting is done, not stuck.
        require_attach();
        // What an attach and detach of such a target costs in this run, ms:
        // the bound below is never tighter than three of them.
        double session_ms = 0;
        for (int i = 0; i < 3; ++i) {
            auto target = child_process::spawn({GROUP_EXIT_TARGET, "all-exit", "60"});
            REQUIRE(target.require_line(10s) == "ready");
            auto start = std::chrono::steady_clock::now();
            auto tdctl = child_process::spawn({tdctl_path(), "-p", std::to_string(target.pid()), "-e", "detach"});
            REQUIRE(tdctl.require_exit(tdctl_bound).is_success());
            session_ms = std::max(
                session_ms,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        }
        const double bound_ms = std::max(1000.0, 3 * session_ms);
        std::mt19937 rng(std::random_device{}());
        // Around the exit, so that some rounds see it during the detach.
        std::uniform_int_distribution<int> watch_ms(250, 350);
        double slowest_ms = 0;
        int late = 0;
        for (int round = 0; round < 100; ++round) {
            int ms = watch_ms(rng);
            const char* mode = round % 2 == 0 ? "thread-exit" : "all-exit";
            INFO("round ", round, ", mode ", std::string(mode), ", watch for ", ms, " ms of a target that exits after 0.3 s");
            auto target = child_process::spawn({GROUP_EXIT_TARGET, mode, "0.3"});
            REQUIRE(target.require_line(10s) == "ready");
            auto tdctl = child_process::spawn({tdctl_path(), "-p", std::to_string(target.pid()), "-e",
                                               "watch --for " + std::to_string(ms / 1000.0), "-e", "detach"});
            auto tdctl_status = tdctl.wait_exit(tdctl_bound);
            auto ended = std::chrono::steady_clock::now();
            REQUIRE_MESSAGE(tdctl_status.has_value(), "tdctl hung; stderr: ", tdctl.stderr_text());
            std::string err = tdctl.stderr_text();
            CHECK_MESSAGE(err.find("did not stop") == std::string::npos, err);
            CHECK_MESSAGE(err.find("put back") == std::string::npos, err);
            CHECK_MESSAGE(target.require_exit(10s).exit_code() == 7, err);
            // The target's own clock reading just before its exit (the
            // steady clock is CLOCK_MONOTONIC too).
            auto said = target.stdout_text();
            auto at = said.find("exit ");
            REQUIRE_MESSAGE(at != std::string::npos, said);
            auto exited = std::chrono::steady_clock::time_point(
                std::chrono::nanoseconds(std::strtoll(said.c_str() + at + 5, nullptr, 10)));
            double after_ms = std::chrono::duration<double, std::milli>(ended - exited).count();
            // An attach that came after the exit never traced the target.
            if (err.find("zombie") != std::string::npos || err.find("no such process") != std::string::npos)
                continue;
            slowest_ms = std::max(slowest_ms, after_ms);
            if (after_ms >= bound_ms)
                ++late;
            // Once 3 x 10 s: a task held at its exit stop was waited for as
            // stuck. A loaded host (the whole suite beside it) made 3 rounds
            // in 100 end 1.3-2.4 s after the exit; those are counted below.
            CHECK_MESSAGE(after_ms < 5 * bound_ms, "tdctl ended ", after_ms, " ms after the exit; stderr: ", err);
        }
        MESSAGE("slowest end after the exit: ", slowest_ms, " ms; ", late, " of 100 rounds past ", bound_ms,
                " ms (an attach and detach here: ", session_ms, " ms)");
    }
}
