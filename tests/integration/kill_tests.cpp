// `kill`: SIGKILL to an attached or a launched target, promptly, with an exit
// record; tdctl exits 0 (attached) or 128+9 (launched, the target's status).
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

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
