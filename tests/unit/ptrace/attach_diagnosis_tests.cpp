// precheck_attach() on canned /proc/PID/status answers for a real child.
#include <csignal>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "ptrace/attach_diagnosis.hpp"
#include "tests/unit/ptrace/paused_child.hpp"

using namespace tdctl;

namespace {

using test::paused_child;

procfs::status_info dead_leader(pid_t pid, int threads)
{
    procfs::status_info s;
    s.name = "exe";
    s.state = 'Z';
    s.tgid = s.pid = pid;
    s.threads = threads;
    return s;
}

}  // namespace

// An exec from a thread that is not the leader hands the leader's PID to the
// exec'ing thread and then releases the old leader: a status read in between
// shows the old leader as a zombie with "Threads: 0" (its signal handlers
// are gone). tdctl refused such an attach as "a zombie: it has exited" (once
// in CI's 50 rounds on a program that re-execs every 3 ms).
TEST_CASE("precheck_attach: a leader read as a zombie with no thread count is looked at again, not refused")
{
    paused_child child;
    REQUIRE(child.pid > 0);
    int reads = 0;
    auto refusal = ptrace::precheck_attach(child.pid, [&](pid_t pid) -> std::optional<procfs::status_info> {
        return ++reads == 1 ? dead_leader(pid, 0) : procfs::read_status(pid);
    });
    CHECK_MESSAGE(!refusal, (refusal ? refusal->why : std::string()));
    CHECK(reads == 2);
}

TEST_CASE("precheck_attach: a zombie process (one thread counted) is refused as one")
{
    paused_child child;
    REQUIRE(child.pid > 0);
    auto refusal =
        ptrace::precheck_attach(child.pid, [&](pid_t pid) -> std::optional<procfs::status_info> { return dead_leader(pid, 1); });
    REQUIRE(refusal);
    CHECK(refusal->why.find("is a zombie") != std::string::npos);
}
