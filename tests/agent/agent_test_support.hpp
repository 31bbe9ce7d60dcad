// Helpers shared by the in-process agent tests: a scoped session that leaves
// the agent's protocol state clean, event masks from lists, threads running
// lambdas, and queries over the in-process controller's trap log.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <pthread.h>
#include <sys/types.h>
#include <thread_db.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "tests/agent/inproc_controller.h"
#include "tests/support/wait_until.hpp"

namespace tdctl::test::agent {

using std::chrono::milliseconds;
using tdctl::test::wait_until;

inline td_thr_events_t events(std::initializer_list<td_event_e> list)
{
    td_thr_events_t set;
    td_event_emptyset(&set);
    for (td_event_e e : list)
        td_event_addset(&set, e);
    return set;
}

inline td_thr_events_t all_events()
{
    td_thr_events_t set;
    td_event_fillset(&set);
    return set;
}

inline void clear_protocol_state()
{
    td_thr_events_t none = events({});
    tdi_set_global_mask(&none);
    if (uintptr_t me = tdi_self()) {
        tdi_set_report_events(me, 0);
        tdi_set_thread_mask(me, &none);
    }
    tdi_drain();
    tdi_log_clear();
}

/// Every test case runs inside one: the agent found, masks empty, the
/// calling thread's reporting off, no message queued, traps disarmed — on
/// entry and on exit, whatever the assertions did.
class agent_session {
public:
    agent_session()
    {
        REQUIRE_MESSAGE(tdi_init() == 0, tdi_error());
        tdi_disarm();
        clear_protocol_state();
        self_ = tdi_self();
        REQUIRE_MESSAGE(self_ != 0, "the calling thread has no record on __tdagent_thread_list");
    }
    ~agent_session()
    {
        tdi_disarm();
        clear_protocol_state();
    }
    agent_session(const agent_session&) = delete;
    agent_session& operator=(const agent_session&) = delete;

    uintptr_t self() const { return self_; }

    void enable_self(const td_thr_events_t& global)
    {
        tdi_set_global_mask(&global);
        tdi_set_report_events(self_, 1);
    }
    void arm(bool follow = true) { REQUIRE_MESSAGE(tdi_arm(follow ? 1 : 0) == 0, tdi_error()); }

private:
    uintptr_t self_ = 0;
};

/// A pthread running a lambda; joined by its owner (or left, when detached).
class lambda_thread {
public:
    explicit lambda_thread(std::function<void*()> body, const pthread_attr_t* attr = nullptr)
    {
        auto* holder = new std::function<void*()>(std::move(body));
        int detach_state = PTHREAD_CREATE_JOINABLE;
        if (attr != nullptr)
            pthread_attr_getdetachstate(attr, &detach_state);
        int err = pthread_create(&thread_, attr, &lambda_thread::run, holder);
        if (err != 0)
            delete holder;
        REQUIRE(err == 0);
        joined_ = detach_state == PTHREAD_CREATE_DETACHED;
    }
    /// A test that failed half-way still joins the thread (every wait in a
    /// thread body is bounded), so no thread outlives the objects it uses.
    ~lambda_thread()
    {
        if (!joined_)
            pthread_join(thread_, nullptr);
    }
    lambda_thread(const lambda_thread&) = delete;
    lambda_thread& operator=(const lambda_thread&) = delete;

    pthread_t handle() const { return thread_; }
    void* join()
    {
        void* result = nullptr;
        joined_ = true;
        REQUIRE(pthread_join(thread_, &result) == 0);
        return result;
    }
    /// For a thread the test detached itself.
    void forget() { joined_ = true; }

private:
    // The body is freed before it runs, so a thread that never returns
    // (pthread_exit, cancellation) leaks nothing.
    static void* run(void* p)
    {
        std::function<void*()> body = std::move(*static_cast<std::function<void*()>*>(p));
        delete static_cast<std::function<void*()>*>(p);
        return body();
    }

    pthread_t thread_{};
    bool joined_ = false;
};

/// A flag one thread raises and another waits for, without any interposed
/// call (plain atomics), so sequencing a scenario adds no events.
class gate {
public:
    void open() { flag_.store(true, std::memory_order_release); }
    bool wait(milliseconds timeout = milliseconds{5000}) const
    {
        return tdctl::test::wait_until([&] { return flag_.load(std::memory_order_acquire); }, timeout,
                                       milliseconds{1});
    }
    bool is_open() const { return flag_.load(std::memory_order_acquire); }

private:
    std::atomic<bool> flag_{false};
};

inline std::vector<tdi_entry> log_entries()
{
    std::vector<tdi_entry> out;
    for (size_t i = 0; i < tdi_log_size(); ++i)
        out.push_back(*tdi_log_entry(i));
    return out;
}

/// The events one LWP reported with this data, in order.
inline std::vector<int> events_of(pid_t tid, uintptr_t data)
{
    std::vector<int> out;
    for (const tdi_entry& e : log_entries())
        if (e.tid == tid && e.eventdata == data)
            out.push_back(e.event);
    return out;
}

inline std::vector<tdi_entry> entries_of_event(int event)
{
    std::vector<tdi_entry> out;
    for (const tdi_entry& e : log_entries())
        if (e.event == event)
            out.push_back(e);
    return out;
}

inline bool logged(pid_t tid, int event, uintptr_t data, milliseconds timeout = milliseconds{5000})
{
    return tdctl::test::wait_until(
        [&] {
            for (const tdi_entry& e : log_entries())
                if (e.tid == tid && e.event == event && e.eventdata == data)
                    return true;
            return false;
        },
        timeout, milliseconds{1});
}

inline std::string event_list(const std::vector<int>& v)
{
    static const char* names[] = {"NONE",   "READY", "SLEEP",       "SWITCHTO", "SWITCHFROM",  "LOCK_TRY",
                                  "CATCHSIG", "IDLE", "CREATE",     "DEATH",    "PREEMPT",     "PRI_INHERIT",
                                  "REAP",   "CONCURRENCY", "TIMEOUT"};
    std::string s;
    for (int e : v) {
        if (!s.empty())
            s += ",";
        s += e >= 0 && e <= 14 ? names[e] : std::to_string(e);
    }
    return s;
}

inline std::vector<uintptr_t> message_list()
{
    std::vector<uintptr_t> v(4096);
    v.resize(tdi_message_list(v.data(), v.size()));
    return v;
}

inline std::vector<uintptr_t> thread_list()
{
    std::vector<uintptr_t> v(4096);
    v.resize(tdi_thread_list(v.data(), v.size()));
    return v;
}

template <typename T>
uintptr_t addr(T* p)
{
    return reinterpret_cast<uintptr_t>(p);
}

}  // namespace tdctl::test::agent
