// Regression tests: each case failed before its fix. Each states what SPEC
// requires.
//
// SPEC §4: "Detach: disarm event reporting (masks and enable flags written
// back to what they were at attach) ... After a detach the target's text and
// data are byte-for-byte what they were." §9: "Detach leaves the target
// running with text and data bytes unchanged."
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"
#include "core/session/session.hpp"
#include "core/thread_handle.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"
#include "tests/conformance/steer_driver.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::conformance;

namespace {

std::unique_ptr<core::session> attach(steer_fixture& fx)
{
    auto s = core::session::attach(fx.pid());
    REQUIRE_MESSAGE(s->target().agent() != nullptr, "no thread agent: ", s->target().no_agent_reason());
    return s;
}

std::uint64_t word_at(pid_t pid, target_addr addr)
{
    auto bytes = peek(pid, addr, 8);
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data(), 8);
    return v;
}

td_thr_events_t mask_at(pid_t pid, target_addr addr)
{
    auto bytes = peek(pid, addr, sizeof(td_thr_events_t));
    td_thr_events_t m{};
    std::memcpy(&m, bytes.data(), sizeof m);
    return m;
}

}  // namespace

TEST_CASE("detach leaves no event message queued by reporting the session switched on")
{
    test::require_ptrace();
    steer_fixture fx;
    core::protocol_layout layout;
    {
        auto s = attach(fx);
        layout = s->target().agent()->layout();
        s->detach();
    }
    const std::uint64_t head_before = word_at(fx.pid(), layout.last_event);
    REQUIRE(head_before == 0);

    spawned_thread b;
    {
        // The seed's flow by hand: reporting on for creations, no breakpoints;
        // the creation is queued in the target and never read.
        auto s = attach(fx);
        s->interrupt();
        auto main = main_thread(*s);
        REQUIRE(s->changes().ta_set_event(mask_of({TD_CREATE})));
        REQUIRE(s->changes().thr_event_enable(main, true));
        s->resume();
        b = fx.spawn(s.get());
        s->detach();
    }
    // The list head in libc's data and the new thread's buffer should be as
    // they were (nothing queued); a later debugger must not find our message.
    CHECK_MESSAGE(word_at(fx.pid(), layout.last_event) == head_before,
                  "__nptl_last_event still points at the thread created during the session");
    auto buf_word = word_at(fx.pid(), b.handle + layout.eventnum.offset);
    CHECK_MESSAGE((buf_word & 0xffffffffu) == TD_EVENT_NONE, "the thread's buffer still holds a message");
    {
        auto s = attach(fx);
        s->interrupt();
        auto m = s->target().agent()->event_getmsg();
        CHECK_MESSAGE(!m.has_value(), "a fresh session reads a stale ", events::event_name(m ? m->event : TD_EVENT_NONE),
                      " left by the previous one");
        s->resume();
    }
}

TEST_CASE("detach: a thread born during the session does not keep the creator's edited mask")
{
    test::require_ptrace();
    steer_fixture fx;
    core::protocol_layout layout;
    target_addr main_handle;
    {
        auto s = attach(fx);
        layout = s->target().agent()->layout();
        main_handle = main_thread(*s).value();
        s->detach();
    }
    const td_thr_events_t main_before = mask_at(fx.pid(), main_handle + layout.eventmask.offset);

    spawned_thread b;
    {
        auto s = attach(fx);
        s->interrupt();
        REQUIRE(s->changes().thr_set_event(main_thread(*s), mask_of({TD_CREATE, TD_REAP})));
        s->resume();
        // glibc copies the creator's event buffer, mask included, into the
        // new thread (pthread_create: pd->eventbuf = self->eventbuf).
        b = fx.spawn(s.get());
        s->detach();
    }
    auto main_after = mask_at(fx.pid(), main_handle + layout.eventmask.offset);
    REQUIRE(same_mask(main_after, main_before));   // the creator itself is restored
    // Without tdctl the thread would have inherited the creator's original mask.
    auto b_after = mask_at(fx.pid(), b.handle + layout.eventmask.offset);
    CHECK_MESSAGE(same_mask(b_after, main_before), "the thread born during the session kept ", describe_mask(b_after),
                  " after detach; the creator's mask before attach was ", describe_mask(main_before));
}

TEST_CASE("session::kill() ends and reaps a launched target promptly")
{
    // traced_process::kill() sends SIGKILL and then waits for a status of the
    // leader that is not a stop; but each task first reports a
    // PTRACE_EVENT_EXIT stop, which kill() never resumes. It gives up after
    // 5 s and leaves the target in a tracing stop ('t'), unreaped.
    test::require_ptrace();
    for (bool held : {true, false}) {
        INFO(std::string(held ? "held at the entry point" : "running, with threads"));
        ptrace::launch_options opts;
        opts.argv = {test::fixture_path("sleeper"), "2"};
        auto s = core::session::launch(opts);
        pid_t pid = s->target().pid();
        if (!held) {
            s->resume();
            auto deadline = std::chrono::steady_clock::now() + 5s;
            while (test::task_tids(pid).size() < 3 && std::chrono::steady_clock::now() < deadline)
                s->pump(10);
            REQUIRE(test::task_tids(pid).size() == 3);
        }
        auto start = std::chrono::steady_clock::now();
        s->kill();
        auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
        CHECK_MESSAGE(took < 2000ms, "kill() took ", took.count(), " ms");
        CHECK_FALSE(s->is_alive());
        auto state = test::proc_state(pid);
        CHECK_MESSAGE(!state.has_value(), "after kill() the target is still there in state '", std::string(1, state.value_or('?')),
                      "', traced by ", test::tracer_pid(pid).value_or(-1));
    }
}
