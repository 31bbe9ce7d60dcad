// Errors in a batch (commands on stdin, -e, -x, --batch) as gdb -batch
// treats its -ex commands: the failed command prints its error record, the
// commands after it run, and tdctl exits 2 at the end. Each case failed
// before its fix: the first mistyped line ended the session, and `detach`
// then `quit` said "1 command not run".
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

/// A sleeper fixture with one worker: two threads.
struct sleeper_target {
    temp_file record{"batch-sleeper"};
    child_process process;
    sleeper_target() : process(start_fixture("sleeper", {"--record", record.path(), "1"}, record.path())) {}
    pid_t pid() const { return process.pid(); }
    std::string pid_text() const { return std::to_string(process.pid()); }
};

/// The index of the first record of `type` in `records`, or -1.
long first_of(const std::vector<json>& records, std::string_view type)
{
    for (std::size_t i = 0; i < records.size(); ++i)
        if (records[i].value("type", "") == type)
            return static_cast<long>(i);
    return -1;
}

/// The "message" of every error record.
std::vector<std::string> error_messages(const tdctl_run& run)
{
    std::vector<std::string> out;
    for (const auto& r : run.of_type("error"))
        out.push_back(r.value("message", ""));
    return out;
}

}  // namespace

TEST_SUITE("batch errors")
{
    TEST_CASE("stdin: a mistyped line is an error record, the lines after it run, exit 2")
    {
        require_attach();
        sleeper_target t;
        for (bool batch : {false, true}) {
            INFO("--batch: ", batch);
            std::vector<std::string> args{"--json"};
            if (batch)
                args.push_back("--batch");
            args.insert(args.end(), {"-p", t.pid_text()});
            run_options input;
            input.stdin_text = "frob\nthreads\n";
            auto run = run_tdctl(args, 30s, input);
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 2);
            const auto errors = error_messages(run);
            REQUIRE(errors.size() == 1);
            CHECK(errors[0].starts_with("stdin:1: unknown command 'frob'"));
            // `threads` ran after the error: its rows, one per thread, come after it.
            CHECK(run.of_type("thread").size() == 2);
            CHECK(first_of(run.records, "error") < first_of(run.records, "thread"));
            CHECK(run.of_type("detached").size() == 1);
            CHECK_FALSE(contains(run.result.err, "not run"));
            CHECK(tracer_pid(t.pid()) == 0);
        }
    }

    TEST_CASE("-e: two failed commands among three, the third runs, exit 2 at the end")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"--batch", "-p", t.pid_text(), "-e", "bogus", "-e", "watch --count x", "-e", "lwpinfo"},
                             30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, "-e 1: unknown command 'bogus'"));
        CHECK(contains(run.result.err, "-e 2: bad count 'x'"));
        CHECK(contains(run.result.out, "lwp_utime"));
        CHECK_FALSE(contains(run.result.out, "not run"));
        CHECK(tracer_pid(t.pid()) == 0);
    }

    TEST_CASE("a failure is not hidden by the last command's status: exit 2, not 1")
    {
        require_attach();
        sleeper_target t;
        // `event getmsg` finds no message: alone it exits 1.
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "frob", "-e", "event getmsg"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.out, "TD_NOMSG"));
    }

    TEST_CASE("-x FILE: a mistyped line does not end the file")
    {
        require_attach();
        sleeper_target t;
        temp_file script("batch-script");
        {
            std::ofstream out(script.path());
            out << "frob\nthreads\n# a comment\nlwpinfo\n";
        }
        auto run = run_tdctl({"--json", "-p", t.pid_text(), "-x", script.path()}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        const auto errors = error_messages(run);
        REQUIRE(errors.size() == 1);
        CHECK(errors[0].starts_with(script.path() + ":1: unknown command 'frob'"));
        CHECK(run.of_type("thread").size() == 2);
        CHECK(run.of_type("lwpinfo").size() == 2);
        CHECK(tracer_pid(t.pid()) == 0);
    }

    TEST_CASE("`detach` then `quit`: no command is named as not run; exit 0")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "detach", "-e", "quit"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        CHECK(contains(run.result.out, "detached from process"));
        CHECK_FALSE(contains(run.result.out + run.result.err, "not run"));

        run_options input;
        input.stdin_text = "detach\nquit\n";
        auto piped = run_tdctl({"-p", t.pid_text()}, 30s, input);
        INFO(piped.describe());
        CHECK(piped.result.status.exit_code() == 0);
        CHECK_FALSE(contains(piped.result.out + piped.result.err, "not run"));

        // A command before the `quit` is still named; what follows the `quit` would not have run.
        auto between = run_tdctl({"-p", t.pid_text(), "-e", "detach", "-e", "threads", "-e", "quit", "-e", "lwpinfo"},
                                 30s);
        INFO(between.describe());
        CHECK(between.result.status.exit_code() == 0);
        CHECK(contains(between.result.out, "detached from the target; 1 command not run, from `threads` (-e 2)"));
        CHECK(tracer_pid(t.pid()) == 0);
    }
}
