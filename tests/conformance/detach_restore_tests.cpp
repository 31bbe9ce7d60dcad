// Detach puts back what an attached session changed (SPEC §2.1, §8): the
// global mask, every pre-existing thread's enable flag and mask, and the
// bytes at the reporting addresses, read past tdctl through /proc/PID/mem on
// the `steer` fixture. The seed's mask, enable and getmsg semantics
// themselves are tested once for both backends in
// tests/agent_e2e/backend_semantics_tests.cpp.
#include <doctest/doctest.h>

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

// What detach must put back: the global mask, and each pre-existing thread's
// enable flag and mask, as raw bytes read past tdctl.
struct event_state {
    std::vector<std::uint8_t> global;
    std::map<target_addr, std::pair<std::vector<std::uint8_t>, std::vector<std::uint8_t>>> threads;
    bool operator==(const event_state&) const = default;
};

struct state_layout {
    target_addr global_mask;
    target_addr last_event;
    std::uint32_t report_events_offset = 0;
    std::uint32_t report_events_bytes = 0;
    std::uint32_t eventmask_offset = 0;
    std::vector<target_addr> threads;
    std::vector<std::pair<target_addr, std::uint64_t>> reporting_code;   // address, st_size
};

event_state read_state(pid_t pid, const state_layout& l)
{
    event_state st;
    st.global = peek(pid, l.global_mask, sizeof(td_thr_events_t));
    for (target_addr h : l.threads)
        st.threads[h] = {peek(pid, h + l.report_events_offset, l.report_events_bytes),
                         peek(pid, h + l.eventmask_offset, sizeof(td_thr_events_t))};
    return st;
}

std::string describe(const event_state& st)
{
    auto hex = [](const std::vector<std::uint8_t>& b) {
        std::string s;
        for (auto c : b)
            s += fmt::format("{:02x}", c);
        return s;
    };
    std::string out = "global " + hex(st.global);
    for (const auto& [h, v] : st.threads)
        out += fmt::format("; {} flag {} mask {}", h, hex(v.first), hex(v.second));
    return out;
}

std::vector<std::uint8_t> mask_bytes(const td_thr_events_t& m)
{
    std::vector<std::uint8_t> out(sizeof m);
    std::memcpy(out.data(), &m, sizeof m);
    return out;
}

// Learns the addresses from a first, read-only session (then detached), and
// puts a state in place that is not the default, so that a restore to
// "everything off" would not pass by accident.
state_layout prepare_target(steer_fixture& fx, const std::vector<spawned_thread>& threads)
{
    state_layout l;
    {
        auto s = attach(fx);
        const auto& layout = s->target().agent()->layout();
        l.global_mask = layout.global_mask;
        l.last_event = layout.last_event;
        l.report_events_offset = layout.report_events.offset;
        l.report_events_bytes = layout.report_events.element_bytes();
        l.eventmask_offset = layout.eventmask.offset;
        REQUIRE(l.report_events_bytes >= 1);
        l.threads.push_back(main_thread(*s).value());
        for (const auto& t : threads)
            l.threads.push_back(t.handle);
        for (td_event_e e : {TD_CREATE, TD_DEATH}) {
            auto r = s->target().agent()->reporting_address_of(e);
            REQUIRE(r.has_value());
            l.reporting_code.push_back({r->address, std::max<std::uint64_t>(r->function_size, 2)});
        }
        s->detach();
    }
    REQUIRE(test::tracer_pid(fx.pid()) == 0);
    std::vector<std::uint8_t> on(l.report_events_bytes, 0);
    on[0] = 1;
    poke(fx.pid(), l.global_mask, mask_bytes(mask_of({TD_SLEEP})));
    poke(fx.pid(), l.threads[0] + l.eventmask_offset, mask_bytes(mask_of({TD_CONCURRENCY})));
    poke(fx.pid(), l.threads[1] + l.report_events_offset, on);
    poke(fx.pid(), l.threads[2] + l.eventmask_offset, mask_bytes(mask_of({TD_DEATH, TD_READY})));
    return l;
}

// Edits through every journaled session call, on every pre-existing thread.
void edit_everything(core::session& s, const state_layout& l)
{
    s.interrupt();
    REQUIRE(s.changes().ta_set_event(mask_of({TD_CREATE, TD_DEATH})));
    REQUIRE(s.changes().ta_clear_event(mask_of({TD_SLEEP})));
    auto main = handle_in(s, l.threads[0]);
    REQUIRE(s.changes().thr_event_enable(main, true));
    td_thr_events_t all;
    events::td_event_fillset(all);
    REQUIRE(s.changes().thr_set_event(main, all));
    REQUIRE(s.changes().thr_event_enable(handle_in(s, l.threads[1]), false));
    REQUIRE(s.changes().thr_set_event(handle_in(s, l.threads[1]), mask_of({TD_CREATE})));
    REQUIRE(s.changes().thr_clear_event(handle_in(s, l.threads[2]), mask_of({TD_DEATH})));
    REQUIRE(s.changes().thr_set_event(handle_in(s, l.threads[2]), mask_of({TD_TIMEOUT})));
    REQUIRE(s.changes().thr_event_enable(handle_in(s, l.threads[3]), true));
    s.resume();
}

}  // namespace

TEST_CASE("detach restores the global mask and every pre-existing thread's flag and mask")
{
    test::require_ptrace();
    steer_fixture fx;
    std::vector<spawned_thread> threads;
    for (int i = 0; i < 3; ++i)
        threads.push_back(fx.spawn(nullptr));
    auto l = prepare_target(fx, threads);
    auto before = read_state(fx.pid(), l);

    {
        auto s = attach(fx);
        edit_everything(*s, l);
        // Something happens meanwhile: a thread is born (the main thread now
        // reports, so it queues a message) and another one ends.
        auto extra = fx.spawn(s.get());
        fx.release(extra, s.get());
        auto during = read_state(fx.pid(), l);
        REQUIRE_MESSAGE(during != before, "the edits did not change the target");
        s->detach();
    }
    CHECK(test::tracer_pid(fx.pid()) == 0);
    auto after = read_state(fx.pid(), l);
    CHECK_MESSAGE(after == before, "before attach: ", describe(before), "\nafter detach:  ", describe(after));
    CHECK(fx.ask("ping", nullptr) == "pong");
}

TEST_CASE("detach after arm() restores flags, masks and the reporting code")
{
    test::require_ptrace();
    steer_fixture fx;
    std::vector<spawned_thread> threads;
    for (int i = 0; i < 3; ++i)
        threads.push_back(fx.spawn(nullptr));
    auto l = prepare_target(fx, threads);
    auto before = read_state(fx.pid(), l);
    auto list_head_before = peek(fx.pid(), l.last_event, 8);
    std::vector<std::vector<std::uint8_t>> code_before;
    for (auto [addr, size] : l.reporting_code)
        code_before.push_back(peek(fx.pid(), addr, size));

    {
        auto s = attach(fx);
        REQUIRE(s->arm({TD_CREATE, TD_DEATH}));
        edit_everything(*s, l);
        auto extra = fx.spawn(s.get());
        fx.release(extra, s.get());
        fx.pump_for(*s, 50ms);
        // The armed session saw both events of the extra thread.
        int creates = 0, deaths = 0;
        for (const auto& ev : fx.take_events()) {
            if (ev.what != core::session_event::kind::message || ev.message.tid.value != extra.tid)
                continue;
            creates += ev.message.event == TD_CREATE;
            deaths += ev.message.event == TD_DEATH;
        }
        CHECK(creates == 1);
        CHECK(deaths == 1);
        s->detach();
    }
    CHECK(test::tracer_pid(fx.pid()) == 0);
    auto after = read_state(fx.pid(), l);
    CHECK_MESSAGE(after == before, "before attach: ", describe(before), "\nafter detach:  ", describe(after));
    for (std::size_t i = 0; i < l.reporting_code.size(); ++i)
        CHECK(peek(fx.pid(), l.reporting_code[i].first, l.reporting_code[i].second) == code_before[i]);
    // Armed, every message was drained at its reporting address: none is
    // left queued in the target.
    CHECK(peek(fx.pid(), l.last_event, 8) == list_head_before);
    CHECK(fx.ask("ping", nullptr) == "pong");
}
