// Batch mode: commands from -e and stdin (with and without --batch), the exit
// status (1: the last command found nothing, 3: it timed out), commands that
// `detach` or the target's exit leave unrun named, stdin read line by line
// and ended by `detach`, a failed write to the output (-o, a closed stdout).
// Errors in a batch: batch_error_tests.cpp. Each case failed before its fix.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

TEST_SUITE("batch")
{
    // A `stop` that timed out and an `event getmsg` that found TD_NOMSG
    // both exited 0: a script could not tell them from success.
    TEST_CASE("exit 1 when the last command found nothing, 3 when it timed out, 0 otherwise")
    {
        require_attach();
        sleeper_target t;
        auto nothing = run_tdctl({"-p", t.pid_text(), "-e", "event getmsg"}, 30s);
        INFO(nothing.describe());
        CHECK(nothing.result.status.exit_code() == 1);
        CHECK(contains(nothing.result.out, "TD_NOMSG"));
        auto timed_out = run_tdctl({"-p", t.pid_text(), "-e", "stop create --for 0.3"}, 30s);
        INFO(timed_out.describe());
        CHECK(timed_out.result.status.exit_code() == 3);
        auto later_ok = run_tdctl({"-p", t.pid_text(), "-e", "event getmsg", "-e", "threads"}, 30s);
        INFO(later_ok.describe());
        CHECK(later_ok.result.status.exit_code() == 0);
        auto no_event = run_tdctl({"--json", "-p", t.pid_text(), "-e", "event addr sleep"}, 30s);
        INFO(no_event.describe());
        CHECK(no_event.result.status.exit_code() == 1);
        CHECK(no_event.of_type("error").empty());
        CHECK(tracer_pid(t.pid()) == 0);
    }

    // Commands left when a launched target exited were dropped without a word.
    TEST_CASE("commands the target's exit leaves unrun are named")
    {
        require_ptrace();
        auto run = run_tdctl({"-e", "sleep 2", "-e", "threads", "-e", "# a comment", "-e", "lwpinfo all", "--", "sh",
                              "-c", "exit 3"},
                             30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 3);
        // A note: the output in text mode.
        CHECK((run.result.out + run.result.err).find("2 commands not run, from `threads` (-e 2)") != std::string::npos);
    }

    // `--batch` (never prompt) also stopped tdctl from reading commands on
    // stdin, and piped commands ran only once stdin reached its end.
    TEST_CASE("commands on stdin run as each line arrives, also with --batch")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        const std::string tid = std::to_string(target.pid());
        for (bool batch : {false, true}) {
            INFO("--batch: ", batch);
            std::vector<std::string> argv{tdctl_path(), "--json"};
            if (batch)
                argv.push_back("--batch");
            argv.insert(argv.end(), {"-p", tid});
            auto tdctl = child_process::spawn(argv);
            REQUIRE(tdctl.write_stdin("threads\n"));
            // The answer comes while stdin is still open.
            int threads = 0;
            while (threads < 3) {
                auto line = tdctl.read_line(20s);
                REQUIRE_MESSAGE(line.has_value(), "no answer to `threads` before end of input; stderr: ",
                                tdctl.stderr_text());
                auto rec = json::parse(*line, nullptr, false);
                threads += rec.value("type", "") == "thread";
            }
            REQUIRE(tdctl.write_stdin("quit\n"));
            tdctl.close_stdin();
            CHECK(tdctl.require_exit(20s).is_success());
            CHECK(tracer_pid(target.pid()) == 0);
        }
    }

    // Commands piped on stdin went on being read after `detach`, until end
    // of input: tdctl stayed with nothing to act on as long as the writer
    // kept the pipe open.
    TEST_CASE("stdin: `detach` ends the session while the input is still open")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(target.pid())});
        REQUIRE(tdctl.write_stdin("detach\n"));
        // stdin stays open: the session must end by itself.
        auto status = tdctl.wait_exit(20s);
        REQUIRE_MESSAGE(status.has_value(), "tdctl still reads stdin after detach; stderr: ", tdctl.stderr_text());
        CHECK(status->is_success());
        auto records = parse_records(tdctl.stdout_text());
        CHECK(records_of_type(records, "detached").size() == 1);
        CHECK(records_of_type(records, "error").empty());
        CHECK(tracer_pid(target.pid()) == 0);
    }

    // `-e detach -e threads` ran `threads` after the detach, which failed and
    // made the run exit 2.
    TEST_CASE("-e: commands after `detach` are named as not run; exit 0")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        auto run = run_tdctl({"-p", std::to_string(target.pid()), "-e", "detach", "-e", "threads"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        CHECK(run.result.out.find("detached from the target; 1 command not run, from `threads` (-e 2)") !=
              std::string::npos);
        CHECK(run.result.out.find("TRACEME") == std::string::npos);
        CHECK(tracer_pid(target.pid()) == 0);
    }

    // Failed writes were ignored: `-o /dev/full` or a closed stdout exited 0
    // with the records lost.
    TEST_CASE("a failed write to the output fails the run (exit 2) and the target is left clean")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        const std::string pid = std::to_string(target.pid());
        {
            auto run = run_tdctl({"-p", pid, "-o", "/dev/full", "-e", "threads", "-e", "watch --for 0.3"}, 30s);
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 2);
            CHECK(run.result.err.find("writing /dev/full failed: No space left on device") != std::string::npos);
        }
        {
            auto run = run_command({"/bin/sh", "-c", "exec \"$0\" -p \"$1\" -e threads >&-", tdctl_path(), pid}, 30s);
            INFO(run.describe());
            CHECK(run.status.exit_code() == 2);
            CHECK(run.err.find("standard output is closed") != std::string::npos);
        }
        CHECK(tracer_pid(target.pid()) == 0);
    }
}
