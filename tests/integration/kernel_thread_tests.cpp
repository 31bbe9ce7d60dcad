// Attaching to a kernel thread (SPEC §4 "Errors a user will meet"): one clear
// line, exit 2, nothing traced. A PID namespace (a container) may show no
// kernel thread at all; then this program exits with the skip code (77),
// which is why the case has an executable of its own: skipping it skips
// nothing else.
#include <doctest/doctest.h>

#include <algorithm>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

TEST_SUITE("bad targets")
{
    TEST_CASE("a kernel thread: one line, exit 2, it stays untraced")
    {
        require_ptrace();
        auto kthread = kernel_thread_pid();
        if (!kthread)
            skip_test("no kernel thread is visible in this PID namespace");
        auto run = run_tdctl({"-p", std::to_string(*kthread)}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.is_exited());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(std::count(run.result.err.begin(), run.result.err.end(), '\n') == 1);
        CHECK(run.result.err.starts_with("tdctl: "));
        CHECK(run.result.err.find("kernel thread") != std::string::npos);
        CHECK(run.result.err.find(std::to_string(*kthread)) != std::string::npos);
        CHECK(run.result.out.empty());
        CHECK(tracer_pid(*kthread) == 0);
    }
}
