// libtdagent's event protocol, checked from inside a target: the program
// links the agent, reads and writes the protocol through its exported
// symbols and descriptors (tests/agent/inproc_controller.c, the same way
// core/ reads it), and plays each event's scenario deterministically.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <optional>
#include <span>

#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "agent/tdagent.h"
#include "agent/tdagent_record.h"
#include "core/protocol/event_rings.hpp"
#include "tests/agent/agent_test_support.hpp"
#include "tests/support/child_process.hpp"

using namespace tdctl::test::agent;

namespace {

const uint32_t* descriptor(const char* name)
{
    std::string symbol = std::string("_tdagent_db_") + name;
    return static_cast<const uint32_t*>(dlsym(RTLD_DEFAULT, symbol.c_str()));
}

void check_field(const char* name, uint32_t bits, uint32_t count, uint32_t offset)
{
    CAPTURE(name);
    const uint32_t* d = descriptor(name);
    REQUIRE(d != nullptr);
    CHECK(d[0] == bits);
    CHECK(d[1] == count);
    CHECK(d[2] == offset);
}

timespec deadline_in(clockid_t clock, long ms)
{
    timespec ts{};
    clock_gettime(clock, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

std::atomic<int> handler_runs{0};
std::atomic<int> handler_signo{0};
void plain_handler(int sig)
{
    handler_runs.fetch_add(1);
    handler_signo.store(sig);
}
void info_handler(int sig, siginfo_t* info, void*)
{
    handler_runs.fetch_add(1);
    handler_signo.store(info != nullptr ? info->si_signo : -sig);
}

}  // namespace

TEST_CASE("the agent publishes its version, the initial thread and zeroed counters")
{
    agent_session s;
    CHECK(std::string(static_cast<const char*>(dlsym(RTLD_DEFAULT, "__tdagent_version"))) == "tdagent 1");
    CHECK(std::string(__tdagent_version) == "tdagent 1");
    uintptr_t main_rec = tdi_record_of(getpid());
    REQUIRE(main_rec != 0);
    CHECK(tdi_tid(main_rec) == getpid());
    CHECK(tdi_start_routine(main_rec) == 0);
    CHECK(tdi_report_events(main_rec) == 0);
    CHECK(tdi_nthreads() >= 1);
    CHECK(tdi_nthreads() == static_cast<int>(thread_list().size()));
    CHECK(tdi_concurrency() == 0);
    CHECK(message_list().empty());
}

TEST_CASE("descriptors are glibc's {bits, count, offset} and match the record layout")
{
    using rec = tdagent_thread;
    check_field("pthread_report_events", 8, 1, offsetof(rec, report_events));
    check_field("pthread_eventbuf", sizeof(td_eventbuf_t) * 8, 1, offsetof(rec, eventbuf));
    check_field("pthread_eventbuf_eventmask", 64, 1, offsetof(rec, eventbuf.eventmask));
    check_field("pthread_eventbuf_eventmask_event_bits", 32, 2, offsetof(rec, eventbuf.eventmask.event_bits));
    check_field("td_eventbuf_t_eventnum", 32, 1, offsetof(td_eventbuf_t, eventnum));
    check_field("td_eventbuf_t_eventdata", 64, 1, offsetof(td_eventbuf_t, eventdata));
    check_field("td_thr_events_t_event_bits", 32, 2, 0);
    check_field("pthread_nextevent", 64, 1, offsetof(rec, nextevent));
    check_field("pthread_tid", 32, 1, offsetof(rec, tid));
    check_field("pthread_start_routine", 64, 1, offsetof(rec, start_routine));
    check_field("pthread_list", 128, 1, offsetof(rec, list));
    check_field("list_t_next", 64, 1, offsetof(tdagent_list, next));
    check_field("list_t_prev", 64, 1, offsetof(tdagent_list, prev));
    auto sizeof_of = [](const char* name) {
        auto* p = static_cast<const uint32_t*>(dlsym(RTLD_DEFAULT, (std::string("_tdagent_db_sizeof_") + name).c_str()));
        REQUIRE(p != nullptr);
        return *p;
    };
    CHECK(sizeof_of("pthread") == sizeof(tdagent_thread));
    CHECK(sizeof_of("td_eventbuf_t") == sizeof(td_eventbuf_t));
    CHECK(sizeof_of("td_thr_events_t") == sizeof(td_thr_events_t));
    CHECK(sizeof_of("list_t") == sizeof(tdagent_list));

    // glibc's own descriptors use the same convention (nptl_db/structs.def).
    if (auto* g = static_cast<const uint32_t*>(dlsym(RTLD_DEFAULT, "_thread_db_pthread_eventbuf_eventmask"))) {
        CHECK(g[0] == 64);
        CHECK(g[1] == 1);
    }
}

TEST_CASE("each reporting function is a one-byte ret at its own address, followed by padding")
{
    agent_session s;
    const td_event_e supported[] = {TD_CREATE, TD_DEATH,   TD_REAP,     TD_LOCK_TRY,    TD_SLEEP,
                                    TD_READY,  TD_TIMEOUT, TD_CATCHSIG, TD_CONCURRENCY, TD_PRI_INHERIT};
    std::vector<uintptr_t> seen;
    for (td_event_e e : supported) {
        CAPTURE(e);
        uintptr_t a = tdi_event_address(e);
        REQUIRE(a != 0);
        CHECK(tdi_event_size(e) == 1);
        auto* code = reinterpret_cast<const unsigned char*>(a);
        CHECK(code[0] == 0xc3);
        CHECK(code[1] == 0xcc);
        CHECK(std::find(seen.begin(), seen.end(), a) == seen.end());
        seen.push_back(a);
    }
    for (const char* missing : {"__tdagent_event_switchto", "__tdagent_event_switchfrom", "__tdagent_event_preempt",
                                "__tdagent_event_idle"})
        CHECK(dlsym(RTLD_DEFAULT, missing) == nullptr);
}

TEST_CASE("with reporting off nothing is recorded, whatever the masks say")
{
    agent_session s;
    td_thr_events_t all = all_events();
    tdi_set_global_mask(&all);
    tdi_set_thread_mask(s.self(), &all);
    s.arm();

    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&m);
    gate trying;
    lambda_thread t([&]() -> void* {
        trying.open();
        pthread_mutex_lock(&m);  // contended, but the thread reports nothing
        pthread_mutex_unlock(&m);
        return nullptr;
    });
    REQUIRE(trying.wait());
    usleep(20000);
    pthread_mutex_unlock(&m);
    t.join();
    raise(SIGWINCH);  // default action: ignored

    CHECK(tdi_log_size() == 0);
    CHECK(message_list().empty());
    CHECK(tdi_eventnum(s.self()) == TD_EVENT_NONE);
}

TEST_CASE("TD_CREATE: the creator reports it after the new thread is registered and before it runs user code")
{
    agent_session s;
    s.enable_self(events({TD_CREATE}));

    std::atomic<int> seen_eventnum{-1};
    std::atomic<uintptr_t> seen_eventdata{0}, own_record{0};
    std::atomic<bool> on_list{false};
    gate go;
    lambda_thread t([&]() -> void* {
        uintptr_t me = tdi_self();
        seen_eventnum = me ? tdi_eventnum(me) : -1;
        seen_eventdata = me ? tdi_eventdata(me) : 0;
        auto list = thread_list();
        on_list = std::find(list.begin(), list.end(), me) != list.end();
        own_record = me;  // last: the main thread reads the others once it sees this
        go.wait();
        return nullptr;
    });
    REQUIRE(wait_until([&] { return own_record.load() != 0; }, milliseconds{5000}));
    uintptr_t rec = own_record;
    // The message was already in the new thread's buffer when it started.
    CHECK(seen_eventnum == TD_CREATE);
    CHECK(seen_eventdata == rec);
    CHECK(on_list);
    CHECK(tdi_tid(rec) != 0);
    CHECK(tdi_tid(rec) != getpid());
    CHECK(tdi_report_events(rec) == 0);  // threads start with reporting disabled
    // Only the new thread's buffer holds it; the creator's own is empty.
    CHECK(tdi_eventnum(s.self()) == TD_EVENT_NONE);
    CHECK(message_list() == std::vector<uintptr_t>{rec});
    int num = 0;
    uintptr_t data = 0;
    REQUIRE(tdi_getmsg(rec, &num, &data) == 0);
    CHECK(num == TD_CREATE);
    CHECK(data == rec);
    CHECK(tdi_getmsg(rec, &num, &data) == -1);  // reading consumed it
    CHECK(message_list().empty());
    go.open();
    t.join();
}

TEST_CASE("TD_CREATE: at the stop the new thread is held, so the controller can enable it")
{
    agent_session s;
    s.enable_self(events({TD_CREATE}));
    s.arm(/*follow=*/true);
    std::atomic<int> enabled_at_start{-1};
    lambda_thread t([&]() -> void* {
        enabled_at_start = tdi_report_events(tdi_self());
        return nullptr;
    });
    t.join();
    CHECK(enabled_at_start == 1);
    auto creates = entries_of_event(TD_CREATE);
    REQUIRE(creates.size() == 1);
    CHECK(creates[0].tid == gettid());
    CHECK(creates[0].eventnum == TD_CREATE);
    CHECK(creates[0].eventdata == creates[0].subject);
}

TEST_CASE("new threads copy the creator's mask, not its message, and start with reporting off")
{
    agent_session s;
    td_thr_events_t own = events({TD_LOCK_TRY, TD_DEATH, TD_CONCURRENCY});
    tdi_set_thread_mask(s.self(), &own);
    tdi_set_report_events(s.self(), 1);
    REQUIRE(pthread_setconcurrency(2) == 0);  // a message in the creator's buffer
    REQUIRE(tdi_eventnum(s.self()) == TD_CONCURRENCY);

    td_thr_events_t child_mask{};
    std::atomic<int> child_enabled{-1}, child_eventnum{-1};
    lambda_thread t([&]() -> void* {
        uintptr_t me = tdi_self();
        tdi_thread_mask(me, &child_mask);
        child_enabled = tdi_report_events(me);
        child_eventnum = tdi_eventnum(me);
        return nullptr;
    });
    t.join();
    CHECK(std::memcmp(&child_mask, &own, sizeof own) == 0);
    CHECK(child_enabled == 0);
    CHECK(child_eventnum == TD_EVENT_NONE);
    REQUIRE(pthread_setconcurrency(0) == 0);
}

TEST_CASE("one buffer per thread: a second event overwrites an unread one; the list holds each thread once")
{
    agent_session s;
    td_thr_events_t own = events({TD_CONCURRENCY});
    tdi_set_thread_mask(s.self(), &own);
    tdi_set_report_events(s.self(), 1);

    // Another thread with a buffer of its own, reporting SLEEP and READY.
    sem_t sem;
    sem_init(&sem, 0, 0);
    std::atomic<uintptr_t> other{0};
    lambda_thread t([&]() -> void* {
        uintptr_t me = tdi_self();
        td_thr_events_t mine = events({TD_SLEEP, TD_READY});
        tdi_set_thread_mask(me, &mine);
        tdi_set_report_events(me, 1);
        other = me;
        sem_wait(&sem);  // SLEEP, then READY, both on &sem
        return nullptr;
    });
    REQUIRE(wait_until([&] { return other.load() != 0 && tdi_eventnum(other) == TD_SLEEP; }, milliseconds{5000}));
    CHECK(tdi_eventdata(other) == addr(&sem));

    REQUIRE(pthread_setconcurrency(3) == 0);
    REQUIRE(pthread_setconcurrency(5) == 0);
    CHECK(tdi_eventnum(s.self()) == TD_CONCURRENCY);
    CHECK(tdi_eventdata(s.self()) == 5);
    CHECK(tdi_concurrency() == 5);
    CHECK(pthread_getconcurrency() == 5);
    auto list = message_list();
    CHECK(list.size() == 2);
    CHECK(std::count(list.begin(), list.end(), s.self()) == 1);
    CHECK(std::count(list.begin(), list.end(), other.load()) == 1);

    sem_post(&sem);
    REQUIRE(wait_until([&] { return tdi_eventnum(other) == TD_READY; }, milliseconds{5000}));
    t.join();
    CHECK(tdi_eventnum(other) == TD_READY);  // READY overwrote SLEEP in the same buffer
    CHECK(tdi_eventdata(other) == addr(&sem));
    CHECK(tdi_eventdata(s.self()) == 5);     // and left ours alone
    list = message_list();
    CHECK(list.size() == 2);
    CHECK(std::count(list.begin(), list.end(), other.load()) == 1);

    // Consumed, then reported again: back on the list, still once.
    REQUIRE(tdi_getmsg(s.self(), nullptr, nullptr) == 0);
    list = message_list();
    CHECK(std::count(list.begin(), list.end(), s.self()) == 0);
    REQUIRE(pthread_setconcurrency(7) == 0);
    list = message_list();
    CHECK(std::count(list.begin(), list.end(), s.self()) == 1);
    CHECK(tdi_eventdata(s.self()) == 7);
    sem_destroy(&sem);
    REQUIRE(pthread_setconcurrency(0) == 0);
}

namespace {

enum class exit_path { return_value, pthread_exit, cancellation };

void check_death(exit_path path)
{
    agent_session s;
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    std::atomic<uintptr_t> rec{0};
    gate waiting;
    lambda_thread t([&]() -> void* {
        uintptr_t me = tdi_self();
        td_thr_events_t own = events({TD_DEATH});
        tdi_set_thread_mask(me, &own);
        tdi_set_report_events(me, 1);
        rec = me;
        if (path == exit_path::pthread_exit)
            pthread_exit(reinterpret_cast<void*>(7));
        if (path == exit_path::cancellation) {
            pthread_mutex_lock(&m);
            waiting.open();
            // A cancellation point inside an interposed call; bounded, so a
            // failed test still ends.
            timespec until = deadline_in(CLOCK_REALTIME, 10000);
            while (pthread_cond_timedwait(&cv, &m, &until) != ETIMEDOUT) {
            }
            pthread_mutex_unlock(&m);
            return nullptr;
        }
        return reinterpret_cast<void*>(7);
    });
    if (path == exit_path::cancellation) {
        REQUIRE(waiting.wait());
        REQUIRE(pthread_cancel(t.handle()) == 0);
    }
    void* result = t.join();
    if (path == exit_path::cancellation) {
        CHECK(result == PTHREAD_CANCELED);
        pthread_mutex_unlock(&m);  // the cancelled waiter reacquired it
    } else {
        CHECK(result == reinterpret_cast<void*>(7));
    }
    uintptr_t r = rec;
    REQUIRE(r != 0);
    CHECK(tdi_eventnum(r) == TD_DEATH);
    CHECK(tdi_eventdata(r) == r);
    CHECK(tdi_tid(r) == 0);
    auto live = thread_list();
    CHECK(std::find(live.begin(), live.end(), r) == live.end());
    auto queued = message_list();
    CHECK(std::count(queued.begin(), queued.end(), r) == 1);
}

}  // namespace

TEST_CASE("TD_DEATH is reported by the dying thread on every exit path")
{
    SUBCASE("return from the start routine") { check_death(exit_path::return_value); }
    SUBCASE("pthread_exit") { check_death(exit_path::pthread_exit); }
    SUBCASE("cancellation") { check_death(exit_path::cancellation); }
}

TEST_CASE("TD_DEATH when the initial thread calls pthread_exit")
{
    auto child = tdctl::test::child_process::spawn({TDAGENT_MAIN_EXIT_PROBE});
    auto status = child.require_exit(milliseconds{10000});
    CHECK_MESSAGE(status.is_success(), status.describe(), " ", child.stderr_text());
}

TEST_CASE("TD_REAP")
{
    agent_session s;

    SUBCASE("the joiner reports it with the reaped handle")
    {
        s.enable_self(events({TD_REAP}));
        std::atomic<uintptr_t> rec{0};
        lambda_thread t([&]() -> void* {
            rec = tdi_self();
            return nullptr;
        });
        t.join();
        CHECK(tdi_eventnum(s.self()) == TD_REAP);
        CHECK(tdi_eventdata(s.self()) == rec.load());
    }
    SUBCASE("pthread_tryjoin_np and pthread_timedjoin_np reap too")
    {
        s.enable_self(events({TD_REAP}));
        for (int timed = 0; timed < 2; ++timed) {
            CAPTURE(timed);
            std::atomic<uintptr_t> rec{0};
            pthread_t t;
            REQUIRE(pthread_create(
                        &t, nullptr,
                        [](void* p) -> void* {
                            static_cast<std::atomic<uintptr_t>*>(p)->store(tdi_self());
                            return nullptr;
                        },
                        &rec) == 0);
            REQUIRE(wait_until([&] { return rec.load() != 0 && tdi_tid(rec) == 0; }, milliseconds{5000}));
            tdi_drain();
            if (timed) {
                timespec ts = deadline_in(CLOCK_REALTIME, 5000);
                REQUIRE(pthread_timedjoin_np(t, nullptr, &ts) == 0);
            } else {
                REQUIRE(wait_until([&] { return pthread_tryjoin_np(t, nullptr) == 0; }, milliseconds{5000}));
            }
            CHECK(tdi_eventnum(s.self()) == TD_REAP);
            CHECK(tdi_eventdata(s.self()) == rec.load());
        }
    }
    SUBCASE("a detached thread reports its own reaping at exit")
    {
        td_thr_events_t reap = events({TD_REAP});
        tdi_set_global_mask(&reap);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        std::atomic<uintptr_t> rec{0};
        lambda_thread t(
            [&]() -> void* {
                uintptr_t me = tdi_self();
                tdi_set_report_events(me, 1);
                rec = me;
                return nullptr;
            },
            &attr);
        pthread_attr_destroy(&attr);
        REQUIRE(wait_until([&] { return rec.load() != 0 && tdi_eventnum(rec) == TD_REAP; }, milliseconds{5000}));
        CHECK(tdi_eventdata(rec) == rec.load());
        CHECK(tdi_tid(rec) == 0);
        CHECK(tdi_eventnum(s.self()) == TD_EVENT_NONE);
    }
    SUBCASE("pthread_detach of a running thread: it reaps itself at exit")
    {
        td_thr_events_t reap = events({TD_REAP});
        tdi_set_global_mask(&reap);
        tdi_set_report_events(s.self(), 1);
        std::atomic<uintptr_t> rec{0};
        gate detached;
        lambda_thread t([&]() -> void* {
            uintptr_t me = tdi_self();
            tdi_set_report_events(me, 1);
            rec = me;
            detached.wait();
            return nullptr;
        });
        REQUIRE(wait_until([&] { return rec.load() != 0; }, milliseconds{5000}));
        REQUIRE(pthread_detach(t.handle()) == 0);
        t.forget();
        CHECK(tdi_eventnum(s.self()) == TD_EVENT_NONE);  // nothing reaped yet
        detached.open();
        REQUIRE(wait_until([&] { return tdi_eventnum(rec) == TD_REAP; }, milliseconds{5000}));
        CHECK(tdi_eventdata(rec) == rec.load());
    }
    SUBCASE("pthread_detach of an exited thread reaps it: the detacher reports")
    {
        std::atomic<uintptr_t> rec{0};
        lambda_thread t([&]() -> void* {
            rec = tdi_self();
            return nullptr;
        });
        REQUIRE(wait_until([&] { return rec.load() != 0 && tdi_tid(rec) == 0; }, milliseconds{5000}));
        s.enable_self(events({TD_REAP}));
        REQUIRE(pthread_detach(t.handle()) == 0);
        t.forget();
        CHECK(tdi_eventnum(s.self()) == TD_REAP);
        CHECK(tdi_eventdata(s.self()) == rec.load());
    }
}

TEST_CASE("TD_CATCHSIG: a handler installed with sigaction or signal reports the signal number")
{
    agent_session s;
    s.enable_self(events({TD_CATCHSIG}));
    handler_runs = 0;

    SUBCASE("sigaction, plain handler; the old action reads back as the user's")
    {
        struct sigaction act {}, old{};
        act.sa_handler = plain_handler;
        sigemptyset(&act.sa_mask);
        act.sa_flags = SA_RESTART;
        REQUIRE(sigaction(SIGUSR1, &act, nullptr) == 0);
        REQUIRE(sigaction(SIGUSR1, nullptr, &old) == 0);
        CHECK((old.sa_handler == plain_handler));
        CHECK((old.sa_flags & SA_SIGINFO) == 0);
        CHECK((old.sa_flags & SA_RESTART) != 0);

        raise(SIGUSR1);
        CHECK(handler_runs == 1);
        CHECK(handler_signo == SIGUSR1);
        CHECK(tdi_eventnum(s.self()) == TD_CATCHSIG);
        CHECK(tdi_eventdata(s.self()) == 10);
    }
    SUBCASE("sigaction, SA_SIGINFO handler gets its siginfo")
    {
        struct sigaction act {}, old{};
        act.sa_sigaction = info_handler;
        sigemptyset(&act.sa_mask);
        act.sa_flags = SA_SIGINFO;
        REQUIRE(sigaction(SIGUSR1, &act, nullptr) == 0);
        REQUIRE(sigaction(SIGUSR1, nullptr, &old) == 0);
        CHECK((old.sa_sigaction == info_handler));
        CHECK((old.sa_flags & SA_SIGINFO) != 0);
        s.arm();
        raise(SIGUSR1);
        CHECK(handler_runs == 1);
        CHECK(handler_signo == SIGUSR1);
        auto hits = entries_of_event(TD_CATCHSIG);
        REQUIRE(hits.size() == 1);
        CHECK(hits[0].eventnum == TD_CATCHSIG);
        CHECK(hits[0].eventdata == 10);
        CHECK(hits[0].subject == s.self());
        CHECK(hits[0].tid == gettid());
    }
    SUBCASE("signal() returns the previous user handler")
    {
        CHECK((signal(SIGUSR1, plain_handler) != SIG_ERR));
        CHECK((signal(SIGUSR1, plain_handler) == plain_handler));
        raise(SIGUSR1);
        CHECK(handler_runs == 1);
        CHECK(tdi_eventdata(s.self()) == 10);
    }
    SUBCASE("not reported with the event out of the masks; the handler still runs")
    {
        td_thr_events_t other = events({TD_DEATH});
        tdi_set_global_mask(&other);
        signal(SIGUSR1, plain_handler);
        raise(SIGUSR1);
        CHECK(handler_runs == 1);
        CHECK(tdi_eventnum(s.self()) == TD_EVENT_NONE);
    }
    signal(SIGUSR1, SIG_DFL);
    struct sigaction now {};
    sigaction(SIGUSR1, nullptr, &now);
    CHECK((now.sa_handler == SIG_DFL));
}

TEST_CASE("TD_TIMEOUT: an expired timed condition wait reports the condvar; SLEEP and READY bracket it")
{
    agent_session s;
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

    SUBCASE("buffer")
    {
        s.enable_self(events({TD_TIMEOUT}));
        pthread_mutex_lock(&m);
        timespec ts = deadline_in(CLOCK_REALTIME, 20);
        CHECK(pthread_cond_timedwait(&cv, &m, &ts) == ETIMEDOUT);
        pthread_mutex_unlock(&m);
        CHECK(tdi_eventnum(s.self()) == TD_TIMEOUT);
        CHECK(tdi_eventdata(s.self()) == addr(&cv));
    }
    SUBCASE("sequence at the traps, timedwait and clockwait")
    {
        s.enable_self(events({TD_SLEEP, TD_READY, TD_TIMEOUT}));
        s.arm();
        pthread_mutex_lock(&m);
        timespec ts = deadline_in(CLOCK_REALTIME, 20);
        CHECK(pthread_cond_timedwait(&cv, &m, &ts) == ETIMEDOUT);
        ts = deadline_in(CLOCK_MONOTONIC, 20);
        CHECK(pthread_cond_clockwait(&cv, &m, CLOCK_MONOTONIC, &ts) == ETIMEDOUT);
        pthread_mutex_unlock(&m);
        std::vector<int> expected{TD_SLEEP, TD_TIMEOUT, TD_READY, TD_SLEEP, TD_TIMEOUT, TD_READY};
        CHECK(event_list(events_of(gettid(), addr(&cv))) == event_list(expected));
    }
    SUBCASE("a wait that is signalled does not time out")
    {
        s.enable_self(events({TD_SLEEP, TD_READY, TD_TIMEOUT}));
        s.arm();
        std::atomic<bool> flag{false};
        const pid_t main_tid = gettid();
        lambda_thread t([&]() -> void* {
            CHECK(logged(main_tid, TD_SLEEP, addr(&cv)));
            pthread_mutex_lock(&m);
            flag = true;
            pthread_cond_signal(&cv);
            pthread_mutex_unlock(&m);
            return nullptr;
        });
        pthread_mutex_lock(&m);
        timespec ts = deadline_in(CLOCK_REALTIME, 10000);
        int err = 0;
        while (!flag && err == 0)
            err = pthread_cond_timedwait(&cv, &m, &ts);
        pthread_mutex_unlock(&m);
        t.join();
        CHECK(err == 0);
        CHECK(event_list(events_of(gettid(), addr(&cv))) == event_list({TD_SLEEP, TD_READY}));
    }
}

TEST_CASE("two threads racing one mutex: each reports LOCK_TRY, SLEEP, READY with the mutex")
{
    agent_session s;
    s.enable_self(all_events());
    s.arm(/*follow=*/true);

    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&m);  // uncontended: no event
    std::atomic<pid_t> tids[2] = {0, 0};
    std::atomic<uintptr_t> recs[2] = {0, 0};
    auto body = [&](int i) {
        return [&, i]() -> void* {
            recs[i] = tdi_self();
            tids[i] = gettid();
            pthread_mutex_lock(&m);
            pthread_mutex_unlock(&m);
            return nullptr;
        };
    };
    lambda_thread a(body(0));
    lambda_thread b(body(1));
    CHECK(wait_until([&] { return tids[0] != 0 && tids[1] != 0; }, milliseconds{5000}));
    CHECK(logged(tids[0], TD_SLEEP, addr(&m)));
    CHECK(logged(tids[1], TD_SLEEP, addr(&m)));
    pthread_mutex_unlock(&m);
    a.join();
    b.join();

    std::vector<int> expected{TD_LOCK_TRY, TD_SLEEP, TD_READY};
    CHECK(event_list(events_of(tids[0], addr(&m))) == event_list(expected));
    CHECK(event_list(events_of(tids[1], addr(&m))) == event_list(expected));
    CHECK(events_of(gettid(), addr(&m)).empty());
    for (const tdi_entry& e : log_entries()) {
        CHECK(e.eventnum == e.event);  // every trap found its own message
        for (int i = 0; i < 2; ++i)
            if (e.tid == tids[i])
                CHECK(e.subject == recs[i]);  // a thread's own events land in its own buffer
    }
}

TEST_CASE("TD_PRI_INHERIT: blocking on a contended priority-inheritance mutex")
{
    agent_session s;
    s.enable_self(all_events());
    s.arm(/*follow=*/true);

    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    REQUIRE(pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT) == 0);
    pthread_mutex_t m;
    REQUIRE(pthread_mutex_init(&m, &attr) == 0);
    pthread_mutexattr_destroy(&attr);

    REQUIRE(pthread_mutex_lock(&m) == 0);
    std::atomic<pid_t> tid{0};
    lambda_thread t([&]() -> void* {
        tid = gettid();
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
        return nullptr;
    });
    CHECK(wait_until([&] { return tid != 0; }, milliseconds{5000}));
    CHECK(logged(tid, TD_SLEEP, addr(&m)));
    pthread_mutex_unlock(&m);
    t.join();
    CHECK(event_list(events_of(tid, addr(&m))) == event_list({TD_LOCK_TRY, TD_PRI_INHERIT, TD_SLEEP, TD_READY}));
    pthread_mutex_destroy(&m);
}

TEST_CASE("other contended objects: rwlock, spin lock, timed mutex, semaphore, barrier, join")
{
    agent_session s;
    s.enable_self(all_events());
    s.arm(/*follow=*/true);
    const std::vector<int> lock_sequence{TD_LOCK_TRY, TD_SLEEP, TD_READY};

    SUBCASE("rwlock: a reader blocked by a writer")
    {
        pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
        pthread_rwlock_wrlock(&rw);
        std::atomic<pid_t> tid{0};
        lambda_thread t([&]() -> void* {
            tid = gettid();
            pthread_rwlock_rdlock(&rw);
            pthread_rwlock_unlock(&rw);
            return nullptr;
        });
        CHECK(wait_until([&] { return tid != 0; }, milliseconds{5000}));
        CHECK(logged(tid, TD_SLEEP, addr(&rw)));
        pthread_rwlock_unlock(&rw);
        t.join();
        CHECK(event_list(events_of(tid, addr(&rw))) == event_list(lock_sequence));
    }
    SUBCASE("spin lock")
    {
        pthread_spinlock_t spin;
        pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE);
        pthread_spin_lock(&spin);
        std::atomic<pid_t> tid{0};
        lambda_thread t([&]() -> void* {
            tid = gettid();
            pthread_spin_lock(&spin);
            pthread_spin_unlock(&spin);
            return nullptr;
        });
        CHECK(wait_until([&] { return tid != 0; }, milliseconds{5000}));
        CHECK(logged(tid, TD_SLEEP, addr(&spin)));
        pthread_spin_unlock(&spin);
        t.join();
        CHECK(event_list(events_of(tid, addr(&spin))) == event_list(lock_sequence));
        pthread_spin_destroy(&spin);
    }
    SUBCASE("a timed mutex lock that times out still reports READY, and no TD_TIMEOUT")
    {
        pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&m);
        std::atomic<pid_t> tid{0};
        std::atomic<int> result{-1};
        lambda_thread t([&]() -> void* {
            tid = gettid();
            timespec ts = deadline_in(CLOCK_REALTIME, 20);
            result = pthread_mutex_timedlock(&m, &ts);
            return nullptr;
        });
        t.join();
        pthread_mutex_unlock(&m);
        CHECK(result == ETIMEDOUT);
        CHECK(event_list(events_of(tid, addr(&m))) == event_list(lock_sequence));
    }
    // A thread blocks on `sem` until it is posted: the events it reported on it.
    auto blocked_wait_on = [](sem_t& sem) {
        std::atomic<pid_t> tid{0};
        lambda_thread t([&]() -> void* {
            tid = gettid();
            sem_wait(&sem);
            return nullptr;
        });
        CHECK(wait_until([&] { return tid != 0; }, milliseconds{5000}));
        CHECK(logged(tid, TD_SLEEP, addr(&sem)));
        sem_post(&sem);
        t.join();
        return event_list(events_of(tid, addr(&sem)));
    };
    SUBCASE("semaphore used as a lock (initialised to 1): only a wait that blocks reports, as a lock's does")
    {
        sem_t sem;
        sem_init(&sem, 0, 1);
        sem_wait(&sem);  // available: no event
        CHECK(events_of(gettid(), addr(&sem)).empty());
        CHECK(blocked_wait_on(sem) == event_list(lock_sequence));
        sem_destroy(&sem);
    }
    SUBCASE("counting semaphores (initialised to 0, or posted above 1): a wait that blocks is a SLEEP and a READY")
    {
        for (bool posted_above_one : {false, true}) {
            CAPTURE(posted_above_one);
            sem_t sem;
            sem_init(&sem, 0, posted_above_one ? 1 : 0);
            if (posted_above_one) {
                sem_post(&sem);  // 2: a counter after all
                sem_wait(&sem);
                sem_wait(&sem);
            }
            CHECK(blocked_wait_on(sem) == event_list({TD_SLEEP, TD_READY}));
            sem_destroy(&sem);
        }
    }
    SUBCASE("barrier")
    {
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, nullptr, 2);
        std::atomic<pid_t> tid{0};
        lambda_thread t([&]() -> void* {
            tid = gettid();
            pthread_barrier_wait(&barrier);
            return nullptr;
        });
        pthread_barrier_wait(&barrier);
        t.join();
        CHECK(event_list(events_of(tid, addr(&barrier))) == event_list({TD_SLEEP, TD_READY}));
        CHECK(event_list(events_of(gettid(), addr(&barrier))) == event_list({TD_SLEEP, TD_READY}));
        pthread_barrier_destroy(&barrier);
    }
    SUBCASE("a join that waits: SLEEP and READY on the joined handle, then REAP")
    {
        gate finish;
        std::atomic<uintptr_t> rec{0};
        lambda_thread t([&]() -> void* {
            rec = tdi_self();
            finish.wait();
            return nullptr;
        });
        REQUIRE(wait_until([&] { return rec.load() != 0; }, milliseconds{5000}));
        const pid_t main_tid = gettid();
        lambda_thread opener([&]() -> void* {
            CHECK(logged(main_tid, TD_SLEEP, rec.load()));
            finish.open();
            return nullptr;
        });
        t.join();
        opener.join();
        // CREATE carried the same handle.
        CHECK(event_list(events_of(gettid(), rec.load())) ==
              event_list({TD_CREATE, TD_SLEEP, TD_READY, TD_REAP}));
    }
}

TEST_CASE("TD_CONCURRENCY: the LWP count at each birth and death, and the pthread_setconcurrency level")
{
    agent_session s;
    s.enable_self(events({TD_CREATE, TD_DEATH, TD_CONCURRENCY}));
    s.arm(/*follow=*/true);
    int n0 = tdi_nthreads();

    gate end_first, end_second;
    std::atomic<pid_t> first_tid{0}, second_tid{0};
    lambda_thread first([&]() -> void* {
        first_tid = gettid();
        end_first.wait();
        return nullptr;
    });
    CHECK(tdi_nthreads() == n0 + 1);
    lambda_thread second([&]() -> void* {
        second_tid = gettid();
        end_second.wait();
        return nullptr;
    });
    CHECK(tdi_nthreads() == n0 + 2);
    end_first.open();
    first.join();
    end_second.open();
    second.join();
    CHECK(tdi_nthreads() == n0);
    REQUIRE(pthread_setconcurrency(4) == 0);
    CHECK(tdi_concurrency() == 4);

    std::vector<std::pair<pid_t, uintptr_t>> got;
    for (const tdi_entry& e : entries_of_event(TD_CONCURRENCY))
        got.emplace_back(e.tid, e.eventdata);
    std::vector<std::pair<pid_t, uintptr_t>> expected{
        {gettid(), uintptr_t(n0 + 1)},    // first created
        {gettid(), uintptr_t(n0 + 2)},    // second created
        {first_tid, uintptr_t(n0 + 1)},   // first died
        {second_tid, uintptr_t(n0)},      // second died
        {gettid(), 4},                    // pthread_setconcurrency(4)
    };
    CHECK(got == expected);
    REQUIRE(pthread_setconcurrency(0) == 0);
}

TEST_CASE("many threads creating threads at once: one CREATE, DEATH and REAP each, nothing lost")
{
    agent_session s;
    s.enable_self(events({TD_CREATE, TD_DEATH, TD_REAP}));
    s.arm(/*follow=*/true);
    const int n_outer = 6, n_inner = 40;
    int before = tdi_nthreads();
    {
        std::vector<std::unique_ptr<lambda_thread>> outer;
        for (int i = 0; i < n_outer; ++i)
            outer.push_back(std::make_unique<lambda_thread>([&]() -> void* {
                for (int j = 0; j < n_inner; ++j) {
                    pthread_t t;
                    if (pthread_create(&t, nullptr, [](void*) -> void* { return nullptr; }, nullptr) == 0)
                        pthread_join(t, nullptr);
                }
                return nullptr;
            }));
        for (auto& t : outer)
            t->join();
    }
    const unsigned long total = n_outer * (n_inner + 1);
    CHECK(tdi_count(TD_CREATE) == total);
    CHECK(tdi_count(TD_DEATH) == total);
    CHECK(tdi_count(TD_REAP) == total);
    for (const tdi_entry& e : log_entries())
        CHECK(e.eventnum == e.event);
    CHECK(message_list().empty());  // every message was consumed at its trap
    CHECK(tdi_nthreads() == before);
    CHECK(thread_list().size() == static_cast<size_t>(before));
}

TEST_CASE("after fork the child's list holds only the forking thread")
{
    agent_session s;
    gate finish;
    lambda_thread t([&]() -> void* {
        finish.wait();
        return nullptr;
    });
    REQUIRE(wait_until([] { return tdi_nthreads() >= 2; }, milliseconds{5000}));
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        uintptr_t me = tdi_self();
        bool ok = me != 0 && tdi_tid(me) == getpid() && tdi_nthreads() == 1 && thread_list().size() == 1;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    REQUIRE(wait_until([&] { return waitpid(child, &status, WNOHANG) == child; }, milliseconds{10000}));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    finish.open();
    t.join();
}

namespace {

// The ring layout from the agent's own _tdagent_db_ring_* descriptors, as
// core/protocol/event_rings.cpp reads it from a target.
tdctl::core::ring_layout ring_layout_here()
{
    tdctl::core::ring_layout l;
    for (auto fields : {tdctl::core::ring_layout_fields(), tdctl::core::shared_ring_layout_fields()})
        for (const auto& [member, name] : fields) {
            const uint32_t* d = descriptor(("ring_" + std::string(name)).c_str());
            REQUIRE_MESSAGE(d != nullptr, name);
            l.*member = {d[2], d[0] / 8 * d[1]};
        }
    return l;
}

// The agent's region as this process maps it (the anchor's address).
std::optional<tdctl::core::ring_region> rings_here()
{
    if (__atomic_load_n(&__tdagent_rings.state, __ATOMIC_ACQUIRE) != 2)
        return std::nullopt;
    std::span<std::byte> bytes(reinterpret_cast<std::byte*>(static_cast<uintptr_t>(__tdagent_rings.address)),
                               static_cast<std::size_t>(__tdagent_rings.size));
    return tdctl::core::ring_region::open(bytes, ring_layout_here());
}

// Streams `list` for the length of a scope (every known thread).
class streamed_scope {
public:
    explicit streamed_scope(const td_thr_events_t& list)
    {
        __tdagent_stream_events = list;
        __atomic_store_n(&__tdagent_streaming, 1, __ATOMIC_RELEASE);
    }
    ~streamed_scope()
    {
        __atomic_store_n(&__tdagent_streaming, 0, __ATOMIC_RELEASE);
        __tdagent_stream_events = td_thr_events_t{};
    }
    streamed_scope(const streamed_scope&) = delete;
    streamed_scope& operator=(const streamed_scope&) = delete;
};

}  // namespace

TEST_CASE("streamed events go to the reporting thread's ring, not its buffer, the list or the reporting function; "
          "a thread streams with its own reporting off")
{
    agent_session s;
    s.arm();
    tdi_log_clear();
    streamed_scope streamed(events({TD_LOCK_TRY, TD_SLEEP, TD_READY}));
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&m);
    std::atomic<pid_t> tid{0};
    std::atomic<uintptr_t> rec{0};
    lambda_thread t([&]() -> void* {
        rec = tdi_self();
        tid = gettid();
        pthread_mutex_lock(&m);  // contended: LOCK_TRY, SLEEP, then READY
        pthread_mutex_unlock(&m);
        return nullptr;
    });
    REQUIRE(wait_until([&] { return tid != 0; }, milliseconds{5000}));
    ::usleep(50000);  // let it block
    pthread_mutex_unlock(&m);
    t.join();
    auto region = rings_here();
    REQUIRE(region.has_value());
    std::vector<int> seen;
    for (const auto& ev : region->drain_all()) {
        if (ev.reporter_tid != tid)
            continue;
        seen.push_back(ev.event);
        CHECK(ev.data == addr(&m));
        CHECK(ev.subject.value == rec);
        CHECK(ev.subject_tid == tid);
    }
    CHECK(seen == std::vector<int>{TD_LOCK_TRY, TD_SLEEP, TD_READY});
    CHECK(tdi_report_events(rec) == 0);
    CHECK(events_of(tid, addr(&m)).empty());   // no reporting function was reached
    CHECK(message_list().empty());
}

TEST_CASE("a full ring falls back to the usual report, losing nothing")
{
    agent_session s;
    s.enable_self(events({TD_CONCURRENCY}));
    s.arm();
    tdi_log_clear();
    streamed_scope streamed(events({TD_CONCURRENCY}));
    REQUIRE(pthread_setconcurrency(1) == 0);   // makes the region and this thread's ring
    auto region = rings_here();
    REQUIRE(region.has_value());
    region->drain_all();
    const int total = static_cast<int>(region->ring_entries()) + 5;
    for (int level = 1; level <= total; ++level)
        REQUIRE(pthread_setconcurrency(level) == 0);
    std::vector<uintptr_t> in_ring;
    for (const auto& ev : region->drain_all())
        if (ev.reporter_tid == gettid() && ev.event == TD_CONCURRENCY)
            in_ring.push_back(ev.data);
    std::vector<uintptr_t> reported;
    for (const tdi_entry& e : entries_of_event(TD_CONCURRENCY))
        if (e.tid == gettid())
            reported.push_back(e.eventdata);
    REQUIRE(in_ring.size() == region->ring_entries());
    for (std::size_t i = 0; i < in_ring.size(); ++i)
        CHECK(in_ring[i] == i + 1);
    CHECK(reported == std::vector<uintptr_t>{1025, 1026, 1027, 1028, 1029});
    CHECK(region->drops() == 0);
    REQUIRE(pthread_setconcurrency(0) == 0);
}
