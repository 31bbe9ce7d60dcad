// Usage errors (SPEC §8): exit 64 with a message that says what is wrong, for
// no arguments, both -p and a program, stray words after -e, unknown options,
// bad PIDs and -x with a directory; nothing launched, nothing left traced.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

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

    // A new user's first question, `tdctl -e help`, was "nothing to do:
    // give -p PID to attach, or -- PROG [ARGS] to launch" (exit 64).
    TEST_CASE("-e help and -e 'help CMD' need no target; any other command still does")
    {
        auto all = run_tdctl({"-e", "help"}, 30s);
        INFO(all.describe());
        CHECK(all.result.status.exit_code() == 0);
        CHECK(all.result.out.find("Commands:") != std::string::npos);
        auto two = run_tdctl({"-e", "help watch", "-e", "help locks"}, 30s);
        INFO(two.describe());
        CHECK(two.result.status.exit_code() == 0);
        CHECK(two.result.out.find("watch [EVENTS]") != std::string::npos);
        CHECK(two.result.out.find("locks [--for") != std::string::npos);
        auto mixed = run_tdctl({"-e", "help", "-e", "threads"}, 30s);
        CHECK(mixed.result.status.exit_code() == 64);
        auto unknown = run_tdctl({"-e", "help nosuch"}, 30s);
        CHECK(unknown.result.status.exit_code() == 64);
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

    // `-e` took every following word (`-e threads bogus` ran `threads` and
    // dropped `bogus`); an unknown option was launched as a program; `-p abc`
    // printed a range of 300 digits.
    TEST_CASE("usage errors: stray words, unknown options, bad PIDs")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "1"});
        const std::string pid = std::to_string(target.pid());
        struct usage_case {
            std::vector<std::string> args;
            std::string says;
        };
        for (const auto& c : std::vector<usage_case>{
                 {{"-p", pid, "-e", "threads", "bogus"}, "not both"},
                 {{"-p", pid, "-e", "sleep 0.1", "threads"}, "not both"},
                 {{"--bogus"}, "unknown option --bogus"},
                 {{"--bogus", "-p", pid}, "unknown option --bogus"},
                 {{"-p", "abc"}, "not a process ID: abc"},
                 {{"-p", "0"}, "not a process ID: 0"},
                 {{"-p", "-5"}, "not a process ID"},
             }) {
            auto run = run_tdctl(c.args, 20s);
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 64);
            CHECK(run.result.err.find(c.says) != std::string::npos);
            CHECK(run.result.err.size() < 400);
        }
        CHECK(tracer_pid(target.pid()) == 0);
    }

    // `-x DIR` ran nothing and exited 0.
    TEST_CASE("-x with a directory is refused")
    {
        auto run = run_tdctl({"-x", "/tmp", "--", "true"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 64);
        CHECK(run.result.err.find("Is a directory") != std::string::npos);
    }
}
