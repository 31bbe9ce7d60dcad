// The seed's event semantics (seed 002, SPEC §2.1, §3) through tdctl's
// session API on the `steer` fixture, without breakpoints: messages are left
// in the threads' buffers by glibc itself and read with getmsg.
//   - a thread with reporting disabled reports nothing;
//   - an event is reported iff the reporting thread is enabled and the event
//     is in its own mask or in the global mask;
//   - reading consumes (and keeps the mask); a second event overwrites an
//     unread first; TD_NOMSG when empty; TD_NOEVENT for unsupported events;
//   - detach puts back every mask and enable flag as it was before attach.
#include <doctest/doctest.h>

#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"
#include "core/session.hpp"
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
    REQUIRE_MESSAGE(s->agent() != nullptr, "no thread agent: ", s->no_agent_reason());
    return s;
}

core::event_protocol& protocol(core::session& s)
{
    return s.agent()->protocol();
}

core::event_buffer buffer_of(core::session& s, target_addr handle)
{
    auto b = protocol(s).read_buffer(handle);
    REQUIRE_MESSAGE(b.has_value(), "read_buffer(", fmt::format("{}", handle), "): ", td_name(b.error()));
    return *b;
}

std::vector<target_addr> message_list(core::session& s)
{
    auto l = protocol(s).message_list();
    REQUIRE(l.has_value());
    return *l;
}

td_thr_events_t thread_mask(core::session& s, target_addr handle)
{
    auto m = protocol(s).read_thread_mask(handle);
    REQUIRE(m.has_value());
    return *m;
}

// The list head variable itself, read past tdctl (/proc/PID/mem).
std::uint64_t list_head_word(core::session& s)
{
    auto bytes = peek(s.pid(), s.agent()->layout().last_event, 8);
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data(), 8);
    return v;
}

// No message anywhere: the list is empty, every listed thread's buffer (and
// those of `extra` records, e.g. ended threads) is empty, getmsg says so.
void check_no_message_anywhere(core::session& s, const std::vector<target_addr>& extra = {})
{
    CHECK(list_head_word(s) == 0);
    CHECK(message_list(s).empty());
    auto threads = s.agent()->thr_iter();
    REQUIRE(threads.has_value());
    std::vector<target_addr> records = extra;
    for (const auto& th : *threads)
        records.push_back(th.value());
    for (target_addr h : records) {
        INFO("thread ", fmt::format("{}", h));
        auto b = buffer_of(s, h);
        CHECK_MESSAGE(b.is_empty(), "holds ", events::event_name(b.eventnum));
        CHECK(b.nextevent.is_null());
    }
    auto m = s.agent()->event_getmsg();
    CHECK_MESSAGE(!m.has_value(), "getmsg returned ", events::event_name(m ? m->event : TD_EVENT_NONE));
    if (!m)
        CHECK(m.error() == TD_NOMSG);
}

// A spawn was reported: TD_CREATE in the new thread's buffer, the thread at
// the head of the list, and getmsg hands exactly that message back.
void check_create_reported(core::session& s, const spawned_thread& t)
{
    auto b = buffer_of(s, t.handle);
    CHECK(b.eventnum == TD_CREATE);
    CHECK(b.eventdata == t.handle.value);
    auto list = message_list(s);
    REQUIRE(list.size() == 1);
    CHECK(list[0] == t.handle);
    auto m = s.agent()->event_getmsg();
    REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
    CHECK(m->event == TD_CREATE);
    CHECK(m->handle == t.handle);
    CHECK(m->data == t.handle.value);
}

}  // namespace

TEST_CASE("a thread with reporting disabled reports nothing")
{
    test::require_ptrace();
    steer_fixture fx;
    auto s = attach(fx);
    s->interrupt();
    auto main = main_thread(*s);
    auto info = main.get_info();
    REQUIRE(info.has_value());
    REQUIRE_MESSAGE(info->ti_traceme == 0, "the main thread already reports events");
    REQUIRE(s->ta_set_event(mask_of({TD_CREATE, TD_DEATH})));
    s->resume();

    // The main thread (disabled) creates; a disabled thread dies.
    auto a = fx.spawn(s.get());
    auto b = fx.spawn(s.get());
    fx.release(b, s.get());
    CHECK(fx.take_events().empty());

    s->interrupt();
    auto new_info = handle_in(*s, a.handle).get_info();
    REQUIRE(new_info.has_value());
    CHECK(new_info->ti_traceme == 0);   // threads start with reporting disabled
    check_no_message_anywhere(*s, {b.handle});
    CHECK(handle_in(*s, a.handle).event_getmsg().error() == TD_NOMSG);
    CHECK(handle_in(*s, b.handle).event_getmsg().error() == TD_NOMSG);
    s->resume();
}

TEST_CASE("per-thread mask versus global mask")
{
    test::require_ptrace();
    steer_fixture fx;
    auto s = attach(fx);
    s->interrupt();
    auto main = main_thread(*s);
    REQUIRE(s->thr_event_enable(main, true));
    auto global = s->agent()->global_mask();
    REQUIRE(global.has_value());
    REQUIRE(events::td_eventisempty(*global));
    REQUIRE(events::td_eventisempty(thread_mask(*s, main.value())));

    {
        INFO("only the main thread's own mask holds TD_CREATE: reported");
        REQUIRE(s->thr_set_event(main, mask_of({TD_CREATE})));
        s->resume();
        auto t = fx.spawn(s.get());
        s->interrupt();
        check_create_reported(*s, t);
        check_no_message_anywhere(*s);
    }
    {
        INFO("neither mask holds TD_CREATE: nothing");
        REQUIRE(s->thr_clear_event(main, mask_of({TD_CREATE})));
        REQUIRE(events::td_eventisempty(thread_mask(*s, main.value())));
        s->resume();
        auto t = fx.spawn(s.get());
        s->interrupt();
        check_no_message_anywhere(*s);
        CHECK(handle_in(*s, t.handle).event_getmsg().error() == TD_NOMSG);
    }
    {
        INFO("only the global mask holds TD_CREATE: reported");
        REQUIRE(s->ta_set_event(mask_of({TD_CREATE})));
        s->resume();
        auto t = fx.spawn(s.get());
        s->interrupt();
        check_create_reported(*s, t);
        check_no_message_anywhere(*s);
    }
    {
        INFO("both masks hold other events only (TD_DEATH): nothing");
        REQUIRE(s->ta_clear_event(mask_of({TD_CREATE})));
        REQUIRE(s->ta_set_event(mask_of({TD_DEATH})));
        REQUIRE(s->thr_set_event(main, mask_of({TD_DEATH, TD_SLEEP})));
        s->resume();
        fx.spawn(s.get());
        s->interrupt();
        check_no_message_anywhere(*s);
    }
    {
        INFO("both masks hold TD_CREATE but the main thread is disabled: nothing");
        REQUIRE(s->ta_set_event(mask_of({TD_CREATE})));
        REQUIRE(s->thr_set_event(main, mask_of({TD_CREATE})));
        REQUIRE(s->thr_event_enable(main, false));
        s->resume();
        fx.spawn(s.get());
        s->interrupt();
        check_no_message_anywhere(*s);
    }
    s->resume();
    CHECK(fx.take_events().empty());
}

TEST_CASE("getmsg consumes the message and keeps the mask")
{
    test::require_ptrace();
    steer_fixture fx;
    auto s = attach(fx);
    s->interrupt();
    auto main = main_thread(*s);
    // New threads inherit the creator's mask, so theirs is not empty.
    const td_thr_events_t own = mask_of({TD_CREATE, TD_REAP});
    REQUIRE(s->thr_set_event(main, own));
    REQUIRE(s->thr_event_enable(main, true));
    s->resume();

    {
        INFO("through the thread agent (td_ta_event_getmsg)");
        auto t = fx.spawn(s.get());
        s->interrupt();
        auto mask_before = thread_mask(*s, t.handle);
        CHECK_MESSAGE(same_mask(mask_before, own), describe_mask(mask_before));
        auto m = s->agent()->event_getmsg();
        REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
        CHECK(m->event == TD_CREATE);
        CHECK(m->handle == t.handle);
        CHECK(m->data == t.handle.value);

        auto again = s->agent()->event_getmsg();
        CHECK_MESSAGE(!again.has_value(), "a second getmsg returned ", events::event_name(again ? again->event : TD_EVENT_NONE));
        if (!again)
            CHECK(again.error() == TD_NOMSG);
        CHECK(handle_in(*s, t.handle).event_getmsg().error() == TD_NOMSG);
        auto b = buffer_of(*s, t.handle);
        CHECK(b.is_empty());
        CHECK(b.eventdata == 0);
        CHECK(b.nextevent.is_null());
        auto mask_after = thread_mask(*s, t.handle);
        CHECK_MESSAGE(same_mask(mask_after, mask_before), "mask after getmsg ", describe_mask(mask_after));
        auto info = handle_in(*s, t.handle).get_info();
        REQUIRE(info.has_value());
        CHECK(same_mask(info->ti_events, mask_before));
        s->resume();
    }
    {
        INFO("through the thread handle (td_thr_event_getmsg)");
        auto t = fx.spawn(s.get());
        s->interrupt();
        auto mask_before = thread_mask(*s, t.handle);
        auto m = handle_in(*s, t.handle).event_getmsg();
        REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
        CHECK(m->event == TD_CREATE);
        CHECK(m->handle == t.handle);
        CHECK(m->data == t.handle.value);
        CHECK(handle_in(*s, t.handle).event_getmsg().error() == TD_NOMSG);
        CHECK(s->agent()->event_getmsg().error() == TD_NOMSG);
        auto b = buffer_of(*s, t.handle);
        CHECK(b.is_empty());
        CHECK(b.nextevent.is_null());
        CHECK(same_mask(thread_mask(*s, t.handle), mask_before));
        CHECK(message_list(*s).empty());
        s->resume();
    }
}

TEST_CASE("a second event overwrites an unread first")
{
    test::require_ptrace();
    steer_fixture fx;
    auto s = attach(fx);
    s->interrupt();
    auto main = main_thread(*s);
    REQUIRE(s->ta_set_event(mask_of({TD_CREATE, TD_DEATH})));
    REQUIRE(s->thr_event_enable(main, true));
    s->resume();

    auto t = fx.spawn(s.get());
    s->interrupt();
    {
        auto b = buffer_of(*s, t.handle);
        REQUIRE(b.eventnum == TD_CREATE);
        // T is the only list entry, so its link is null and glibc will record
        // its death in the same buffer.
        REQUIRE(message_list(*s) == std::vector<target_addr>{t.handle});
        REQUIRE(b.nextevent.is_null());
    }
    REQUIRE(s->thr_event_enable(handle_in(*s, t.handle), true));
    s->resume();
    fx.release(t, s.get());

    s->interrupt();
    auto b = buffer_of(*s, t.handle);
    CHECK(b.eventnum == TD_DEATH);
    CHECK(b.eventdata == t.handle.value);

    auto m = handle_in(*s, t.handle).event_getmsg();
    REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
    CHECK_MESSAGE(m->event == TD_DEATH, "read ", events::event_name(m->event), " instead of the newer TD_DEATH");
    CHECK(m->handle == t.handle);
    CHECK(m->data == t.handle.value);
    // One message only: neither the thread nor the agent has another.
    CHECK(handle_in(*s, t.handle).event_getmsg().error() == TD_NOMSG);
    auto more = s->agent()->event_getmsg();
    CHECK_MESSAGE(!more.has_value(), "a second message for the thread: ", events::event_name(more ? more->event : TD_EVENT_NONE));
    CHECK(message_list(*s).empty());
    CHECK(list_head_word(*s) == 0);
    s->resume();
    CHECK(fx.take_events().empty());
}

TEST_CASE("TD_NOMSG when nothing is buffered; TD_NOEVENT for events nptl does not report")
{
    test::require_ptrace();
    steer_fixture fx;
    auto s = attach(fx);
    auto t = fx.spawn(s.get());
    s->interrupt();
    auto main = main_thread(*s);

    CHECK(s->agent()->event_getmsg().error() == TD_NOMSG);
    CHECK(main.event_getmsg().error() == TD_NOMSG);
    CHECK(handle_in(*s, t.handle).event_getmsg().error() == TD_NOMSG);

    CHECK(s->agent()->event_addr(TD_SLEEP).error() == TD_NOEVENT);
    for (int n = TD_MIN_EVENT_NUM; n <= TD_MAX_EVENT_NUM; ++n) {
        auto e = static_cast<td_event_e>(n);
        INFO(events::event_name(e));
        auto a = s->agent()->event_addr(e);
        if (e == TD_CREATE || e == TD_DEATH) {
            REQUIRE(a.has_value());
            CHECK(a->type == NOTIFY_BPT);
            CHECK(a->u.bptaddr != nullptr);
        } else {
            REQUIRE_FALSE(a.has_value());
            CHECK(a.error() == TD_NOEVENT);
        }
    }
    CHECK(s->agent()->event_addr(TD_CREATE)->u.bptaddr != s->agent()->event_addr(TD_DEATH)->u.bptaddr);

    // Arming an event without a reporting address fails whole: nothing armed,
    // the global mask untouched.
    auto global_before = s->agent()->global_mask();
    REQUIRE(global_before.has_value());
    auto armed = s->arm({TD_CREATE, TD_SLEEP});
    REQUIRE_FALSE(armed.has_value());
    CHECK(armed.error() == TD_NOEVENT);
    CHECK_FALSE(s->is_armed());
    auto global_after = s->agent()->global_mask();
    REQUIRE(global_after.has_value());
    CHECK(same_mask(*global_before, *global_after));
    auto stops = s->plant_stops({TD_SLEEP});
    REQUIRE_FALSE(stops.has_value());
    CHECK(stops.error() == TD_NOEVENT);
    s->resume();
}

namespace {

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
        const auto& layout = s->agent()->layout();
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
            auto r = s->agent()->reporting_address_of(e);
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
    REQUIRE(s.ta_set_event(mask_of({TD_CREATE, TD_DEATH})));
    REQUIRE(s.ta_clear_event(mask_of({TD_SLEEP})));
    auto main = handle_in(s, l.threads[0]);
    REQUIRE(s.thr_event_enable(main, true));
    td_thr_events_t all;
    events::td_event_fillset(all);
    REQUIRE(s.thr_set_event(main, all));
    REQUIRE(s.thr_event_enable(handle_in(s, l.threads[1]), false));
    REQUIRE(s.thr_set_event(handle_in(s, l.threads[1]), mask_of({TD_CREATE})));
    REQUIRE(s.thr_clear_event(handle_in(s, l.threads[2]), mask_of({TD_DEATH})));
    REQUIRE(s.thr_set_event(handle_in(s, l.threads[2]), mask_of({TD_TIMEOUT})));
    REQUIRE(s.thr_event_enable(handle_in(s, l.threads[3]), true));
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
