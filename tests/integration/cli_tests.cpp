// The command line's contract (SPEC §8, §4 "Errors a user will meet"):
// usage errors exit 64, failed attaches print one clear line and exit 2
// without leaving anything traced, bad commands in batch mode exit 2 after a
// clean detach.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

std::size_t line_count(const std::string& text)
{
    return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

/// An attach that must fail: exit 2, exactly one line on stderr, nothing on
/// stdout (text mode).
void check_attach_refused(const tdctl_run& run)
{
    INFO(run.describe());
    CHECK(run.result.status.is_exited());
    CHECK(run.result.status.exit_code() == 2);
    CHECK(line_count(run.result.err) == 1);
    CHECK(run.result.err.starts_with("tdctl: "));
    CHECK(run.result.out.empty());
}

}  // namespace

TEST_SUITE("usage")
{
    TEST_CASE("no arguments: exit 64 with a usage message")
    {
        auto run = run_tdctl({}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 64);
        CHECK(!run.result.err.empty());
        CHECK(run.result.out.empty());
    }

    TEST_CASE("both -p and a program: exit 64, nothing launched or attached")
    {
        sleeper_target t;
        auto run = run_tdctl({"-p", t.pid_text(), "--", fixture_path("churn"), "1", "1"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 64);
        CHECK(!run.result.err.empty());
        CHECK(tracer_pid(t.pid()) == 0);
    }

    TEST_CASE("an unknown command: exit 2, the message names -e 1 and the word, the target is detached")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "bogus", "-e", "threads"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, "-e 1"));
        CHECK(contains(run.result.err, "bogus"));
        // The command after the failing one runs, as gdb -batch's -ex do.
        CHECK(contains(run.result.out, "TRACEME"));
        CHECK(contains(run.result.out, "detached"));
        CHECK(tracer_pid(t.pid()) == 0);
        // Back in pause() (just after the detach it may still be on its way
        // there, 'R', on a loaded machine).
        CHECK_MESSAGE(wait_until([&] { return proc_state(t.pid()) == 'S'; }, 5s),
                      "state " << proc_state(t.pid()).value_or('?'));
    }

    TEST_CASE("a bad count: watch --count x exits 2 naming the value")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "threads", "-e", "watch --count x"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, "-e 2"));
        CHECK(contains(run.result.err, "'x'"));
        CHECK(tracer_pid(t.pid()) == 0);
    }

    TEST_CASE("a command file with garbage: exit 2 naming the file and line")
    {
        require_attach();
        sleeper_target t;
        temp_file script("garbage-script");
        std::ofstream(script.path(), std::ios::binary) << "threads\n\x01\x02\xff((garbage\"\nthreads\n";
        auto run = run_tdctl({"-p", t.pid_text(), "-x", script.path()}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, script.path() + ":2"));
        CHECK(tracer_pid(t.pid()) == 0);
    }

    // TD_NOEVENT is the answer for an event the library does not report, not
    // a failure (it failed the batch with exit 2); nothing reported: exit 1.
    TEST_CASE("event addr sleep: TD_NOEVENT on glibc, as an answer record, exit 1")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"--json", "-p", t.pid_text(), "-e", "event addr sleep"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 1);
        CHECK(run.of_type("error").empty());
        auto answers = run.of_type("event_addr");
        REQUIRE(answers.size() == 1);
        CHECK(answers[0]["event"] == "TD_SLEEP");
        CHECK(answers[0]["result"] == "TD_NOEVENT");
        CHECK(answers[0]["address"].is_null());
        CHECK(run.of_type("detached").size() == 1);
        CHECK(tracer_pid(t.pid()) == 0);
    }
}

TEST_SUITE("bad targets")
{
    TEST_CASE("a PID that names no process: one line, exit 2")
    {
        const pid_t pid = unused_pid();
        auto run = run_tdctl({"-p", std::to_string(pid)}, 30s);
        check_attach_refused(run);
        CHECK(contains(run.result.err, std::to_string(pid)));
    }

    TEST_CASE("a process already traced by strace: one line naming the tracer, exit 2, strace keeps it")
    {
        require_attach();
        // scripts/setup-debian.sh installs strace: its absence is a failure.
        auto strace = find_program("strace");
        REQUIRE_MESSAGE(strace.has_value(), "strace is not installed (scripts/setup-debian.sh installs it)");
        sleeper_target t;
        auto tracer = child_process::spawn({*strace, "-p", t.pid_text()});
        REQUIRE_MESSAGE(wait_until([&] { return tracer_pid(t.pid()) == tracer.pid(); }, 10s),
                        "strace did not attach: " << tracer.stderr_text());
        auto run = run_tdctl({"-p", t.pid_text()}, 30s);
        check_attach_refused(run);
        CHECK(contains(run.result.err, std::to_string(tracer.pid())));
        CHECK(contains(run.result.err, "strace"));
        CHECK(tracer_pid(t.pid()) == tracer.pid());

        // The same with --json: an error record too, still exit 2.
        auto json_run = run_tdctl({"--json", "-p", t.pid_text()}, 30s);
        INFO(json_run.describe());
        CHECK(json_run.result.status.exit_code() == 2);
        auto errors = json_run.of_type("error");
        REQUIRE(errors.size() == 1);
        CHECK(contains(errors[0].value("message", ""), std::to_string(tracer.pid())));
        CHECK(json_run.of_type("attached").empty());
        CHECK(tracer_pid(t.pid()) == tracer.pid());
    }

    TEST_CASE("tdctl itself: one line, exit 2")
    {
        require_ptrace();
        auto run = run_command({"/bin/sh", "-c", "exec \"$0\" -p $$", tdctl_path()}, 30s);
        tdctl_run wrapped{run, {}};
        check_attach_refused(wrapped);
        CHECK(contains(run.err, "itself"));
    }
}

TEST_SUITE("kill")
{
    TEST_CASE("kill on an attached target: SIGKILL, an exit record, promptly, exit 0")
    {
        require_attach();
        sleeper_target t;
        auto start = std::chrono::steady_clock::now();
        auto run = run_tdctl({"--json", "-p", t.pid_text(), "-e", "kill"}, 30s);
        auto took = std::chrono::steady_clock::now() - start;
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        auto exits = run.of_type("exit");
        REQUIRE(exits.size() == 1);
        CHECK(exits[0].value("signal", "") == "SIGKILL");
        CHECK(took < 3s);
        auto status = t.process.require_exit(5s);
        CHECK(status.term_signal() == SIGKILL);
    }

    TEST_CASE("kill on a launched target: an exit record and exit status 128+9")
    {
        require_ptrace();
        temp_file record("churn-record");
        auto run = run_tdctl({"--json", "-e", "kill", "--", fixture_path("churn"), "--record", record.path(), "2",
                              "5"},
                             30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 128 + SIGKILL);
        auto exits = run.of_type("exit");
        REQUIRE(exits.size() == 1);
        CHECK(exits[0].value("signal", "") == "SIGKILL");
        // Killed at the entry point, before main: the fixture never opened
        // its record.
        CHECK_FALSE(read_text_file(record.path()).has_value());
    }
}
