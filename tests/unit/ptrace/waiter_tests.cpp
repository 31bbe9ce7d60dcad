// ptrace::waiter: the one blocking wait on a running target (ended by a
// status, its deadline or another thread's wake), the looks by TID that
// stop-all makes, and peek_stop().
#include <doctest/doctest.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <random>
#include <thread>
#include <optional>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ptrace/ptrace_call.hpp"
#include "ptrace/waiter.hpp"
#include "tests/unit/ptrace/paused_child.hpp"

using tdctl::ptrace::wait_end;
using tdctl::ptrace::waiter;

namespace {

// peek_stop() of a traced task until it is in a stop (at most 5 s).
std::optional<tdctl::ptrace::wait_status> peek_until_stopped(tdctl::tid_t tid)
{
    std::optional<tdctl::ptrace::wait_status> stop;
    for (int i = 0; i < 5000 && !stop; ++i) {
        stop = tdctl::ptrace::peek_stop(tid);
        if (!stop)
            ::usleep(1000);
    }
    return stop;
}


using sleeping_child = tdctl::test::paused_child;

double seconds_now()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

TEST_CASE("wait_any(0) only looks: a status when one is waiting, else it ends at once")
{
    waiter w;
    sleeping_child other;  // a child that gives no status
    REQUIRE(other.pid > 0);
    CHECK(w.wait_any(0).end == wait_end::timeout);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
        ::_exit(3);
    siginfo_t info{};
    REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);  // its status is waiting
    auto got = w.wait_any(0);
    REQUIRE(got.end == wait_end::status);
    CHECK(got.tid.value == child);
    CHECK(got.status->exit_code() == 3);
    CHECK(w.wait_any(0).end == wait_end::timeout);
}

TEST_CASE("try_wait takes one task's status without blocking, and says when there is no such child")
{
    waiter w;
    int go[2];
    REQUIRE(::pipe(go) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(go[1]);
        ::alarm(10);   // never outlives a failed test for long
        char c;
        [[maybe_unused]] auto n = ::read(go[0], &c, 1);
        ::_exit(4);
    }
    ::close(go[0]);
    auto running = w.try_wait(tdctl::tid_t{child});
    CHECK_FALSE(running.status.has_value());   // still blocked on the pipe
    CHECK_FALSE(running.no_child);

    ::close(go[1]);   // the child reads EOF and exits
    tdctl::ptrace::taken_status ended;
    for (int i = 0; i < 5000 && !ended.status; ++i) {
        ended = w.try_wait(tdctl::tid_t{child});
        if (!ended.status)
            ::usleep(1000);
    }
    REQUIRE(ended.status.has_value());
    CHECK(ended.tid.value == child);
    CHECK(ended.status->has_ended());
    CHECK(ended.status->exit_code() == 4);

    auto reaped = w.try_wait(tdctl::tid_t{child});
    CHECK_FALSE(reaped.status.has_value());
    CHECK(reaped.no_child);
}

TEST_CASE("waiting for TID 0 (a clone event read after its parent was killed) takes no other task's status")
{
    // Regression: a clone event whose PTRACE_GETEVENTMSG failed gave TID 0,
    // and waitpid(0) took another thread's exit stop, which was then never
    // resumed: the exec waiting for that thread hung with it.
    waiter w;
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
        ::_exit(6);
    siginfo_t info{};
    REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);  // its status is waiting

    auto none = w.try_wait(tdctl::tid_t{0});
    CHECK_FALSE(none.status.has_value());
    CHECK(none.no_child);
    CHECK_FALSE(w.wait_for(tdctl::tid_t{0}).has_value());
    CHECK_FALSE(w.wait_for(tdctl::tid_t{-1}).has_value());

    auto mine = w.try_wait(tdctl::tid_t{child});   // still there for its own TID
    REQUIRE(mine.status.has_value());
    CHECK(mine.status->exit_code() == 6);
}

TEST_CASE("peek_stop reads a held task's stop without waitpid, and that status is never handed out twice")
{
    // A stop-all takes most stops with PTRACE_GETSIGINFO; the kernel keeps
    // the status for waitpid() until the task is resumed. A waitpid() that
    // returned it afterwards would make tdctl handle one stop twice.
    waiter w;
    int go[2];
    REQUIRE(::pipe(go) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(go[1]);
        ::alarm(10);
        char c;
        [[maybe_unused]] auto n = ::read(go[0], &c, 1);
        ::raise(SIGUSR1);  // a signal-delivery-stop under the tracer
        ::_exit(5);
    }
    ::close(go[0]);
    tdctl::tid_t tid{child};
    REQUIRE(tdctl::ptrace::ptrace_call(PTRACE_SEIZE, tid, nullptr, nullptr) == 0);
    CHECK_FALSE(tdctl::ptrace::peek_stop(tid).has_value());  // running: no stop to read

    REQUIRE(tdctl::ptrace::ptrace_call(PTRACE_INTERRUPT, tid, nullptr, nullptr) == 0);
    auto peeked = peek_until_stopped(tid);
    REQUIRE(peeked.has_value());
    CHECK(peeked->kind() == tdctl::ptrace::wait_kind::event_stop);
    CHECK_FALSE(w.try_wait(tid).status.has_value());   // the same stop: dropped, not handed out

    REQUIRE(tdctl::ptrace::ptrace_call(PTRACE_CONT, tid, nullptr, nullptr) == 0);
    ::close(go[1]);   // the child reads EOF and raises SIGUSR1
    auto signal_stop = peek_until_stopped(tid);
    REQUIRE(signal_stop.has_value());
    CHECK(signal_stop->kind() == tdctl::ptrace::wait_kind::signal_stop);
    CHECK(signal_stop->signal_to_deliver() == SIGUSR1);

    // Resumed without a waitpid(): the next status (its exit) comes through.
    REQUIRE(tdctl::ptrace::ptrace_call(PTRACE_CONT, tid, nullptr, nullptr) == 0);
    auto next = w.wait_for(tid);
    REQUIRE(next.has_value());
    CHECK(next->has_ended());
    CHECK(next->exit_code() == 5);
}

TEST_CASE("a waitpid status that differs from the peeked one is handed out (the task left that stop)")
{
    waiter w;
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::alarm(10);
        for (;;)
            ::pause();
    }
    tdctl::tid_t tid{child};
    REQUIRE(tdctl::ptrace::ptrace_call(PTRACE_SEIZE, tid, nullptr, nullptr) == 0);
    REQUIRE(tdctl::ptrace::ptrace_call(PTRACE_INTERRUPT, tid, nullptr, nullptr) == 0);
    auto peeked = peek_until_stopped(tid);
    REQUIRE(peeked.has_value());
    ::kill(child, SIGKILL);  // out of the stop without a resume request
    std::optional<tdctl::ptrace::wait_status> ended;
    for (int i = 0; i < 5000 && !ended; ++i) {
        auto taken = w.try_wait(tid);
        if (taken.status && taken.status->has_ended())
            ended = taken.status;
        else
            ::usleep(1000);
    }
    REQUIRE(ended.has_value());
    CHECK(ended->kind() == tdctl::ptrace::wait_kind::killed);
    CHECK(ended->signal() == SIGKILL);
}


TEST_CASE("a blocking wait_any(-1) is ended by another thread's wake(), and the wake child leaves no status")
{
    REQUIRE(waiter::wakes_blocked_waits());
    waiter w;
    sleeping_child other;  // a child that gives no status: waitpid(-1) would block for good
    REQUIRE(other.pid > 0);
    std::thread waker([&] {
        ::usleep(100 * 1000);
        waiter::wake();
    });
    const double start = seconds_now();
    auto got = w.wait_any(-1);
    const double took = seconds_now() - start;
    waker.join();
    CHECK(got.end == wait_end::woken);
    CHECK_FALSE(got.status.has_value());
    CHECK(took >= 0.09);
    CHECK_MESSAGE(took < 5.0, "the wake did not end the wait");
    // The wake child was reaped by that wait: nothing is left to take.
    auto left = w.try_wait_any();
    CHECK_FALSE(left.status.has_value());
    CHECK_FALSE(left.no_child);
}

TEST_CASE("a wake() while no wait is blocked ends the next wait at once, and only that one")
{
    waiter w;
    sleeping_child other;
    REQUIRE(other.pid > 0);
    waiter::wake();
    CHECK(w.wait_any(-1).end == wait_end::woken);
    CHECK(w.wait_any(20).end == wait_end::timeout);  // the wake was taken

    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
        ::_exit(7);
    auto got = w.wait_any(-1);
    REQUIRE(got.end == wait_end::status);
    CHECK(got.tid.value == child);
    CHECK(got.status->kind() == tdctl::ptrace::wait_kind::exited);
}

TEST_CASE("wait_any(ms) with nothing to take ends at its deadline, never before; 100 deadlines of 0-3 ms")
{
    REQUIRE(waiter::wakes_blocked_waits());
    waiter w;
    sleeping_child other;
    REQUIRE(other.pid > 0);
    std::mt19937 random(7);
    for (int round = 0; round < 100; ++round) {
        const int ms = std::uniform_int_distribution<int>(1, 3)(random);
        const double start = seconds_now();
        auto got = w.wait_any(ms);
        const double took = seconds_now() - start;
        REQUIRE(got.end == wait_end::timeout);
        CHECK(took >= ms / 1000.0);
        REQUIRE_MESSAGE(took < 5.0, "round " << round << ": the deadline did not end the wait");
    }
    (void)w.try_wait_any();  // a late wake child, if any
}

TEST_CASE("500 wakes at random moments around the wait's start: one wake() always suffices")
{
    REQUIRE(waiter::wakes_blocked_waits());
    waiter w;
    sleeping_child other;
    REQUIRE(other.pid > 0);
    std::mt19937 random(99);
    int slow = 0;
    for (int round = 0; round < 500; ++round) {
        std::atomic<bool> returned{false};
        std::atomic<bool> starting{false};
        const double delay_s = std::uniform_int_distribution<int>(0, 20000)(random) * 1e-9;
        std::thread blocked([&] {
            starting.store(true);
            (void)w.wait_any(-1);
            returned.store(true);
        });
        // Aimed at the wait's first microseconds: 0-20 us after it starts.
        while (!starting.load()) {
        }
        for (const double until = seconds_now() + delay_s; seconds_now() < until;) {
        }
        waiter::wake();   // the waker's side, once
        const double start = seconds_now();
        while (!returned.load() && seconds_now() - start < 2.0)
            ::usleep(100);
        if (!returned.load()) {
            ++slow;
            waiter::wake();  // let the thread go, to join it
        }
        blocked.join();
        // A wake child made for a wait that had already returned is swallowed here.
        (void)w.try_wait_any();
    }
    CHECK_MESSAGE(slow == 0, slow << " of 500 waits were not ended by their one wake");
}

TEST_CASE("a wait bounded by at most sliced_wait_ms is ended by another thread's wake() before its bound")
{
    // Such a wait sleeps on the SIGCHLD descriptor (no wake child): the wake
    // reaches it through the eventfd. Before the eventfd it ended only at
    // its bound. A round whose waker thread is held off the CPU for the
    // whole bound proves nothing: up to five rounds, one must end early.
    waiter w;
    sleeping_child other;
    REQUIRE(other.pid > 0);
    const int bound_ms = waiter::sliced_wait_ms;
    bool early = false;
    for (int round = 0; round < 5 && !early; ++round) {
        std::atomic<bool> waiting{false};
        std::thread waker([&] {
            while (!waiting.load()) {
            }
            ::usleep(2000);
            waiter::wake();
        });
        waiting.store(true);
        const double start = seconds_now();
        auto got = w.wait_any(bound_ms);
        const double took = seconds_now() - start;
        waker.join();
        if (got.end == wait_end::timeout)
            (void)w.wait_any(0);  // the wake came after the bound: take it
        else
            CHECK(got.end == wait_end::woken);
        early = got.end == wait_end::woken && took < bound_ms / 1000.0 * 0.9;
        MESSAGE("round ", round, ": ", took * 1000, " ms of a ", bound_ms, " ms bound");
    }
    CHECK(early);
}
