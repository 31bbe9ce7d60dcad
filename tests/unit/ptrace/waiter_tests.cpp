// ptrace::waiter: the signalfd it hands to poll() is readable only while a
// status may be waiting, so a command loop that polls it never spins.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ptrace/waiter.hpp"

using tdctl::ptrace::waiter;

namespace {

bool readable(int fd)
{
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

}  // namespace

TEST_CASE("after wait_any(0) finds nothing to reap, the descriptor is not readable")
{
    waiter w;
    // A child whose SIGCHLD arrives but whose status is taken past wait_any
    // (as wait_for does for a new clone's first stop).
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
        ::_exit(0);
    auto status = w.wait_for(tdctl::tid_t{child});
    REQUIRE(status.has_value());
    CHECK(readable(w.fd()));   // the SIGCHLD is still pending

    CHECK_FALSE(w.wait_any(0).has_value());
    CHECK_MESSAGE(!readable(w.fd()), "a poll() on the descriptor would return at once, forever");
}

TEST_CASE("a status reaped by wait_any(0) leaves nothing readable behind once the next call finds none")
{
    waiter w;
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
        ::_exit(3);
    pollfd p{w.fd(), POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    auto got = w.wait_any(0);
    REQUIRE(got.has_value());
    CHECK(got->first.value == child);
    CHECK_FALSE(w.wait_any(0).has_value());
    CHECK_FALSE(readable(w.fd()));
}
