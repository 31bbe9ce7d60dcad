// Attaches that must fail (SPEC §4 "Errors a user will meet"): a PID that
// names no process, a process already traced (by strace), tdctl itself: one
// line on stderr, exit 2, nothing left traced. A kernel thread:
// kernel_thread_tests.cpp; attaches during a thread storm: harm_tests.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

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
