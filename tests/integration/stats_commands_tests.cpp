// `stats`, `rusage` and `lwpinfo` as typed: an unknown TID gives the error
// alone, `stats show` before `stats enable` says how to start a window. Their
// numbers against /proc: tests/stats/.
#include <doctest/doctest.h>

#include <string>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

TEST_SUITE("stats commands")
{
    // `lwpinfo 99999` printed the table's column headings, then the error.
    TEST_CASE("lwpinfo and rusage collect of an unknown TID: the error alone, no table heading")
    {
        require_attach();
        sleeper_target t;
        const std::string tid = std::to_string(unused_pid());
        auto lwp = run_tdctl({"-p", t.pid_text(), "-e", "lwpinfo " + tid}, 30s);
        INFO(lwp.describe());
        CHECK(lwp.result.status.exit_code() == 2);
        CHECK(contains(lwp.result.err, "ESRCH"));
        CHECK_FALSE(contains(lwp.result.out, "lwp_utime"));
        auto ru = run_tdctl({"-p", t.pid_text(), "-e", "rusage start", "-e", "rusage collect " + tid}, 30s);
        INFO(ru.describe());
        CHECK(ru.result.status.exit_code() == 2);
        CHECK(contains(ru.result.err, "ESRCH"));
        CHECK_FALSE(contains(ru.result.out, "utime s"));
        CHECK(tracer_pid(t.pid()) == 0);
    }

    // `stats show` before any `stats enable` said "gathering off (frozen)",
    // as if a window had been taken and stopped.
    TEST_CASE("stats show before stats enable says how to start a window")
    {
        require_ptrace();
        auto run = run_tdctl({"-e", "stats show", "-e", "stats enable", "-e", "sleep 0.2", "-e", "stats disable", "-e",
                              "stats show", "-e", "kill", "--", fixture_path("sleeper"), "1"},
                             30s);
        INFO(run.describe());
        auto first = run.result.out.find("gathering off (`stats enable` starts a window)");
        CHECK(first != std::string::npos);
        CHECK(run.result.out.find("gathering off (averages frozen)", first) != std::string::npos);
    }
}
