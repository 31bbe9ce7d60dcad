// pthread_getrusage_np (seed 001) and _lwp_info (seed 004) as libtdagent
// provides them to code inside the target.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <string>

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "agent/tdagent.h"
#include "tests/agent/agent_test_support.hpp"
#include "tests/support/child_process.hpp"

using namespace tdctl::test::agent;
using tdctl::test::child_process;
using tdctl::test::spawn_options;

namespace {

double seconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }
double seconds(const timespec& ts) { return ts.tv_sec + ts.tv_nsec / 1e9; }

double thread_cpu_now()
{
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return seconds(ts);
}

// Burns CPU in user mode for about `for_seconds` of this thread's CPU time.
void spin_cpu(double for_seconds)
{
    double end = thread_cpu_now() + for_seconds;
    volatile unsigned long x = 0;
    while (thread_cpu_now() < end)
        for (int i = 0; i < 100000; ++i)
            x = x + i;
}

double tick() { return 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK)); }

std::atomic<int> caught{0};
void count_signal(int) { caught.fetch_add(1); }

}  // namespace

TEST_CASE("COLLECT before START fails with ENOSYS (AIXTHREAD_ENRUSG not ON)")
{
    // A fresh process, so that no START of another test case has run and the
    // caller's environment does not matter.
    spawn_options options;
    options.env.emplace_back("AIXTHREAD_ENRUSG", "");
    auto child = child_process::spawn({TDAGENT_RUSAGE_PROBE}, options);
    auto status = child.require_exit(milliseconds{10000});
    CHECK_MESSAGE(status.is_exited(), status.describe());
    CHECK(child.stdout_text() == "collect=" + std::to_string(ENOSYS) + "\n");
}

TEST_CASE("modes and argument errors")
{
    struct rusage ru {};
    CHECK(pthread_getrusage_np(pthread_self(), &ru, 0) == EINVAL);
    CHECK(pthread_getrusage_np(pthread_self(), &ru, 0x40) == EINVAL);
    CHECK(pthread_getrusage_np(pthread_self(), &ru, PTHRDSINFO_RUSAGE_START | PTHRDSINFO_RUSAGE_COLLECT) == EINVAL);
    REQUIRE(pthread_getrusage_np(pthread_self(), &ru, PTHRDSINFO_RUSAGE_START) == 0);
    CHECK(pthread_getrusage_np(pthread_self(), nullptr, PTHRDSINFO_RUSAGE_COLLECT) == EINVAL);
    CHECK(pthread_getrusage_np(pthread_t{}, &ru, PTHRDSINFO_RUSAGE_COLLECT) == EINVAL);
    // A buffer that is not valid memory: EINVAL, and the program lives.
    CHECK(pthread_getrusage_np(pthread_self(), reinterpret_cast<struct rusage*>(1), PTHRDSINFO_RUSAGE_COLLECT) ==
          EINVAL);
    CHECK(pthread_getrusage_np(pthread_self(), &ru, PTHRDSINFO_RUSAGE_COLLECT) == 0);
    REQUIRE(pthread_getrusage_np(pthread_self(), nullptr, PTHRDSINFO_RUSAGE_STOP) == 0);
    CHECK(pthread_getrusage_np(pthread_self(), &ru, PTHRDSINFO_RUSAGE_COLLECT) == ENOSYS);
    REQUIRE(pthread_getrusage_np(pthread_self(), nullptr, PTHRDSINFO_RUSAGE_START) == 0);
}

TEST_CASE("the calling thread: utime grows while it computes; handled signals are counted")
{
    REQUIRE(pthread_getrusage_np(pthread_self(), nullptr, PTHRDSINFO_RUSAGE_START) == 0);
    struct rusage before {}, after{};
    REQUIRE(pthread_getrusage_np(pthread_self(), &before, PTHRDSINFO_RUSAGE_COLLECT) == 0);
    spin_cpu(0.2);
    signal(SIGUSR2, count_signal);
    caught = 0;
    for (int i = 0; i < 3; ++i)
        raise(SIGUSR2);
    signal(SIGUSR2, SIG_DFL);
    REQUIRE(pthread_getrusage_np(pthread_self(), &after, PTHRDSINFO_RUSAGE_COLLECT) == 0);
    CHECK(caught == 3);
    // 0.2 s of this thread's CPU time went by; the kernel splits it into user
    // and system time by sampling, so under load part of it may show as
    // system time: their sum is what is exact.
    double cpu = seconds(after.ru_utime) - seconds(before.ru_utime) + seconds(after.ru_stime) -
                 seconds(before.ru_stime);
    CHECK(cpu >= 0.18);
    CHECK(seconds(after.ru_utime) - seconds(before.ru_utime) > 0);
    CHECK(after.ru_nsignals - before.ru_nsignals == 3);
    CHECK(after.ru_maxrss > 0);
}

TEST_CASE("another live thread: utime of a busy thread grows; its context switches are counted")
{
    REQUIRE(pthread_getrusage_np(pthread_self(), nullptr, PTHRDSINFO_RUSAGE_START) == 0);
    std::atomic<bool> stop{false};
    std::atomic<int> phase{0};
    lambda_thread busy([&]() -> void* {
        for (int i = 0; i < 5; ++i)
            usleep(1000);  // voluntary switches
        phase = 1;
        volatile unsigned long x = 0;
        while (!stop.load(std::memory_order_relaxed))
            x = x + 1;
        return nullptr;
    });
    REQUIRE(wait_until([&] { return phase.load() == 1; }, milliseconds{5000}));
    struct rusage first {}, second{};
    REQUIRE(pthread_getrusage_np(busy.handle(), &first, PTHRDSINFO_RUSAGE_COLLECT) == 0);
    // Wait until the busy thread has at least 0.2 s more of user time per
    // /proc (ticks), bounded.
    bool grew = wait_until(
        [&] {
            REQUIRE(pthread_getrusage_np(busy.handle(), &second, PTHRDSINFO_RUSAGE_COLLECT) == 0);
            return seconds(second.ru_utime) - seconds(first.ru_utime) >= 0.2;
        },
        milliseconds{10000}, milliseconds{20});
    stop = true;
    busy.join();
    CHECK(grew);
    CHECK(second.ru_nvcsw >= 5);
    CHECK(second.ru_maxrss > 0);
}

TEST_CASE("an exited thread is ESRCH, joined or not")
{
    REQUIRE(pthread_getrusage_np(pthread_self(), nullptr, PTHRDSINFO_RUSAGE_START) == 0);
    struct rusage ru {};
    std::atomic<bool> done{false};
    pthread_t t;
    REQUIRE(pthread_create(
                &t, nullptr,
                [](void* p) -> void* {
                    static_cast<std::atomic<bool>*>(p)->store(true);
                    return nullptr;
                },
                &done) == 0);
    REQUIRE(wait_until([&] { return done.load(); }, milliseconds{5000}));
    // Exited but not joined: the record says tid 0 once the exit path ran.
    REQUIRE(wait_until([&] { return pthread_getrusage_np(t, &ru, PTHRDSINFO_RUSAGE_COLLECT) == ESRCH; },
                       milliseconds{5000}));
    REQUIRE(pthread_join(t, nullptr) == 0);
    CHECK(pthread_getrusage_np(t, &ru, PTHRDSINFO_RUSAGE_COLLECT) == ESRCH);
}

TEST_CASE("AIXTHREAD_ENRUSG=ON makes COLLECT work without START; OFF does not")
{
    auto run = [](const char* value) {
        spawn_options options;
        if (value != nullptr)
            options.env.emplace_back("AIXTHREAD_ENRUSG", value);
        auto child = child_process::spawn({TDAGENT_RUSAGE_PROBE}, options);
        auto status = child.require_exit(milliseconds{10000});
        CHECK_MESSAGE(status.is_exited(), status.describe());
        return child.stdout_text();
    };
    CHECK(run("ON") == "collect=0\n");
    CHECK(run("OFF") == "collect=" + std::to_string(ENOSYS) + "\n");
}

TEST_CASE("_lwp_info: user plus system time is the thread's CPU clock, within a tick")
{
    spin_cpu(0.05);
    struct lwpinfo info {};
    double before = thread_cpu_now();
    REQUIRE(_lwp_info(&info) == 0);
    double after = thread_cpu_now();
    double sum = seconds(info.lwp_utime) + seconds(info.lwp_stime);
    CAPTURE(before);
    CAPTURE(sum);
    CAPTURE(after);
    CHECK(sum >= before - tick());
    CHECK(sum <= after + tick());
    CHECK(seconds(info.lwp_utime) > 0.0);
    CHECK(info.lwp_utime.tv_nsec < 1000000000L);
    CHECK(info.lwp_stime.tv_nsec < 1000000000L);

    // It is the calling LWP's: a fresh thread has used almost nothing.
    struct lwpinfo fresh {};
    std::atomic<int> result{-1};
    lambda_thread t([&]() -> void* {
        result = _lwp_info(&fresh);
        return nullptr;
    });
    t.join();
    CHECK(result == 0);
    CHECK(seconds(fresh.lwp_utime) + seconds(fresh.lwp_stime) < sum);
}

TEST_CASE("_lwp_info: a bad buffer is EFAULT and the program lives")
{
    CHECK(_lwp_info(nullptr) == EFAULT);
    CHECK(_lwp_info(reinterpret_cast<struct lwpinfo*>(1)) == EFAULT);
    long page = sysconf(_SC_PAGESIZE);
    void* ro = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(ro != MAP_FAILED);
    CHECK(_lwp_info(static_cast<struct lwpinfo*>(ro)) == EFAULT);
    munmap(ro, page);
    struct lwpinfo ok {};
    CHECK(_lwp_info(&ok) == 0);
}
