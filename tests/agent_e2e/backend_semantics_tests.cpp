// The seed's event semantics (seed 002, SPEC §2.1, §3), one source, both
// backends: every test case runs as a subcase "nptl" (steer launched as is)
// and "tdagent" (steer launched with libtdagent preloaded), through
// core::session::launch and the same session calls.
//   - a thread with reporting disabled reports nothing;
//   - an event is reported iff the reporting thread is enabled and the event
//     is in its own mask or in the global mask;
//   - reading consumes (and keeps the mask); a second event overwrites an
//     unread first; TD_NOMSG when empty;
//   - event_addr: TD_NOEVENT for what the backend does not report (the four
//     scheduler events on tdagent; all but create/death on nptl);
//   - detach after arm() puts back masks, flags and the reporting code.
// Messages are left in the threads' buffers by the thread library (no
// breakpoints, except in the last case) and read with getmsg.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "core/session/session.hpp"
#include "core/thread_handle.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"
#include "tests/agent_e2e/launched_steer.hpp"
#include "tests/conformance/steer_driver.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;
using tdctl::conformance::describe_mask;
using tdctl::conformance::handle_in;
using tdctl::conformance::main_thread;
using tdctl::conformance::mask_of;
using tdctl::conformance::peek;
using tdctl::conformance::same_mask;
using tdctl::conformance::td_name;

namespace {

/// Runs body once per backend, each as its own subcase.
void on_both_backends(const std::function<void(backend)>& body)
{
    test::require_ptrace();
    SUBCASE("nptl")
    {
        body(backend::nptl);
    }
    SUBCASE("tdagent")
    {
        body(backend::tdagent);
    }
}

td_thr_events_t mask_of_vector(const std::vector<td_event_e>& events)
{
    td_thr_events_t m;
    events::td_event_emptyset(m);
    for (td_event_e e : events)
        events::td_event_addset(m, e);
    return m;
}

core::event_protocol& protocol(core::session& s)
{
    return s.target().agent()->protocol();
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

std::uint64_t list_head_word(core::session& s)
{
    auto bytes = peek(s.target().pid(), s.target().agent()->layout().last_event, 8);
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data(), 8);
    return v;
}

// No message anywhere: the list is empty, every live thread's buffer (and
// those of `extra` records, e.g. ended threads) is empty, getmsg says so.
void check_no_message_anywhere(core::session& s, const std::vector<target_addr>& extra = {})
{
    CHECK(list_head_word(s) == 0);
    CHECK(message_list(s).empty());
    auto threads = s.target().agent()->thr_iter();
    REQUIRE(threads.has_value());
    std::vector<target_addr> records = extra;
    for (const auto& th : *threads)
        records.push_back(th.value());
    for (target_addr h : records) {
        INFO("thread ", fmt::format("{}", h));
        auto b = buffer_of(s, h);
        CHECK_MESSAGE(b.is_empty(), "holds ", events::event_name(b.eventnum), " data ",
                      fmt::format("{:#x}", b.eventdata));
        CHECK(b.nextevent.is_null());
    }
    auto m = s.target().agent()->event_getmsg();
    CHECK_MESSAGE(!m.has_value(), "getmsg returned ", events::event_name(m ? m->event : TD_EVENT_NONE));
    if (!m)
        CHECK(m.error() == TD_NOMSG);
}

// A spawn was reported: TD_CREATE in the new thread's buffer, the thread
// alone on the list, and getmsg hands exactly that message back.
void check_create_reported(core::session& s, const steered_thread& t)
{
    auto b = buffer_of(s, t.handle);
    CHECK(b.eventnum == TD_CREATE);
    CHECK(b.eventdata == t.handle.value);
    auto list = message_list(s);
    REQUIRE(list.size() == 1);
    CHECK(list[0] == t.handle);
    auto m = s.target().agent()->event_getmsg();
    REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
    CHECK(m->event == TD_CREATE);
    CHECK(m->handle == t.handle);
    CHECK(m->data == t.handle.value);
}

}  // namespace

TEST_CASE("a thread with reporting disabled reports nothing")
{
    on_both_backends([](backend b) {
        launched_steer fx(b);
        auto& s = fx.session();
        s.interrupt();
        auto main = main_thread(s);
        auto info = main.get_info();
        REQUIRE(info.has_value());
        REQUIRE_MESSAGE(info->ti_traceme == 0, "the main thread already reports events");
        // Every event the backend has in the global mask: still nothing, for
        // no thread is enabled (on tdagent: not the cond waits, mutexes and
        // joins steer does either).
        REQUIRE(s.changes().ta_set_event(mask_of_vector(supported_events(b))));
        s.resume();

        auto a = fx.spawn();
        auto t = fx.spawn();
        fx.release(t);
        fx.join(t);
        CHECK(fx.take_events().empty());

        s.interrupt();
        auto new_info = handle_in(s, a.handle).get_info();
        REQUIRE(new_info.has_value());
        CHECK(new_info->ti_traceme == 0);   // threads start with reporting disabled
        check_no_message_anywhere(s, {t.handle});
        CHECK(handle_in(s, a.handle).event_getmsg().error() == TD_NOMSG);
        s.resume();
    });
}

TEST_CASE("per-thread mask versus global mask")
{
    on_both_backends([](backend b) {
        launched_steer fx(b);
        auto& s = fx.session();
        s.interrupt();
        auto main = main_thread(s);
        REQUIRE(s.changes().thr_event_enable(main, true));
        auto global = s.target().agent()->global_mask();
        REQUIRE(global.has_value());
        REQUIRE(events::td_eventisempty(*global));
        REQUIRE(events::td_eventisempty(thread_mask(s, main.value())));

        {
            INFO("only the main thread's own mask holds TD_CREATE: reported");
            REQUIRE(s.changes().thr_set_event(main, mask_of({TD_CREATE})));
            s.resume();
            auto t = fx.spawn();
            s.interrupt();
            check_create_reported(s, t);
            check_no_message_anywhere(s);
        }
        {
            INFO("neither mask holds TD_CREATE: nothing");
            REQUIRE(s.changes().thr_clear_event(main, mask_of({TD_CREATE})));
            REQUIRE(events::td_eventisempty(thread_mask(s, main.value())));
            s.resume();
            auto t = fx.spawn();
            s.interrupt();
            check_no_message_anywhere(s);
            CHECK(handle_in(s, t.handle).event_getmsg().error() == TD_NOMSG);
        }
        {
            INFO("only the global mask holds TD_CREATE: reported");
            REQUIRE(s.changes().ta_set_event(mask_of({TD_CREATE})));
            s.resume();
            auto t = fx.spawn();
            s.interrupt();
            check_create_reported(s, t);
            check_no_message_anywhere(s);
        }
        {
            // Events steer's main thread never raises on either backend.
            INFO("both masks hold other events only (TD_DEATH, TD_PRI_INHERIT): nothing");
            REQUIRE(s.changes().ta_clear_event(mask_of({TD_CREATE})));
            REQUIRE(s.changes().ta_set_event(mask_of({TD_DEATH})));
            REQUIRE(s.changes().thr_set_event(main, mask_of({TD_DEATH, TD_PRI_INHERIT})));
            s.resume();
            fx.spawn();
            s.interrupt();
            check_no_message_anywhere(s);
        }
        {
            INFO("both masks hold TD_CREATE but the main thread is disabled: nothing");
            REQUIRE(s.changes().ta_set_event(mask_of({TD_CREATE})));
            REQUIRE(s.changes().thr_set_event(main, mask_of({TD_CREATE})));
            REQUIRE(s.changes().thr_event_enable(main, false));
            s.resume();
            fx.spawn();
            s.interrupt();
            check_no_message_anywhere(s);
        }
        s.resume();
        CHECK(fx.take_events().empty());
    });
}

TEST_CASE("getmsg consumes the message and keeps the mask")
{
    on_both_backends([](backend b) {
        launched_steer fx(b);
        auto& s = fx.session();
        s.interrupt();
        auto main = main_thread(s);
        // New threads inherit the creator's mask, so theirs is not empty.
        const td_thr_events_t own = mask_of({TD_CREATE, TD_REAP});
        REQUIRE(s.changes().thr_set_event(main, own));
        REQUIRE(s.changes().thr_event_enable(main, true));
        s.resume();

        {
            INFO("through the thread agent (td_ta_event_getmsg)");
            auto t = fx.spawn();
            s.interrupt();
            auto mask_before = thread_mask(s, t.handle);
            CHECK_MESSAGE(same_mask(mask_before, own), describe_mask(mask_before));
            auto m = s.target().agent()->event_getmsg();
            REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
            CHECK(m->event == TD_CREATE);
            CHECK(m->handle == t.handle);
            CHECK(m->data == t.handle.value);

            auto again = s.target().agent()->event_getmsg();
            CHECK_MESSAGE(!again.has_value(), "a second getmsg returned ",
                          events::event_name(again ? again->event : TD_EVENT_NONE));
            if (!again)
                CHECK(again.error() == TD_NOMSG);
            CHECK(handle_in(s, t.handle).event_getmsg().error() == TD_NOMSG);
            auto buf = buffer_of(s, t.handle);
            CHECK(buf.is_empty());
            CHECK(buf.eventdata == 0);
            CHECK(buf.nextevent.is_null());
            auto mask_after = thread_mask(s, t.handle);
            CHECK_MESSAGE(same_mask(mask_after, mask_before), "mask after getmsg ", describe_mask(mask_after));
            auto info = handle_in(s, t.handle).get_info();
            REQUIRE(info.has_value());
            CHECK(same_mask(info->ti_events, mask_before));
            s.resume();
        }
        {
            INFO("through the thread handle (td_thr_event_getmsg)");
            auto t = fx.spawn();
            s.interrupt();
            auto mask_before = thread_mask(s, t.handle);
            auto m = handle_in(s, t.handle).event_getmsg();
            REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
            CHECK(m->event == TD_CREATE);
            CHECK(m->handle == t.handle);
            CHECK(m->data == t.handle.value);
            CHECK(handle_in(s, t.handle).event_getmsg().error() == TD_NOMSG);
            CHECK(s.target().agent()->event_getmsg().error() == TD_NOMSG);
            auto buf = buffer_of(s, t.handle);
            CHECK(buf.is_empty());
            CHECK(buf.nextevent.is_null());
            CHECK(same_mask(thread_mask(s, t.handle), mask_before));
            CHECK(message_list(s).empty());
            s.resume();
        }
    });
}

TEST_CASE("a second event overwrites an unread first")
{
    on_both_backends([](backend b) {
        launched_steer fx(b);
        auto& s = fx.session();
        s.interrupt();
        auto main = main_thread(s);
        REQUIRE(s.changes().ta_set_event(mask_of({TD_CREATE, TD_DEATH})));
        REQUIRE(s.changes().thr_event_enable(main, true));
        s.resume();

        auto t = fx.spawn();
        s.interrupt();
        {
            auto buf = buffer_of(s, t.handle);
            REQUIRE(buf.eventnum == TD_CREATE);
            REQUIRE(message_list(s) == std::vector<target_addr>{t.handle});
            REQUIRE(buf.nextevent.is_null());
        }
        REQUIRE(s.changes().thr_event_enable(handle_in(s, t.handle), true));
        s.resume();
        fx.release(t);

        s.interrupt();
        auto buf = buffer_of(s, t.handle);
        CHECK(buf.eventnum == TD_DEATH);
        CHECK(buf.eventdata == t.handle.value);

        auto m = handle_in(s, t.handle).event_getmsg();
        REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
        CHECK_MESSAGE(m->event == TD_DEATH, "read ", events::event_name(m->event), " instead of the newer TD_DEATH");
        CHECK(m->handle == t.handle);
        CHECK(m->data == t.handle.value);
        CHECK(handle_in(s, t.handle).event_getmsg().error() == TD_NOMSG);
        auto more = s.target().agent()->event_getmsg();
        CHECK_MESSAGE(!more.has_value(), "a second message for the thread: ",
                      events::event_name(more ? more->event : TD_EVENT_NONE));
        CHECK(message_list(s).empty());
        CHECK(list_head_word(s) == 0);
        s.resume();
        CHECK(fx.take_events().empty());
    });
}

TEST_CASE("TD_NOMSG when nothing is buffered; TD_NOEVENT for events the backend does not report")
{
    on_both_backends([](backend b) {
        launched_steer fx(b);
        auto& s = fx.session();
        auto t = fx.spawn();
        s.interrupt();
        auto main = main_thread(s);

        CHECK(s.target().agent()->event_getmsg().error() == TD_NOMSG);
        CHECK(main.event_getmsg().error() == TD_NOMSG);
        CHECK(handle_in(s, t.handle).event_getmsg().error() == TD_NOMSG);

        for (td_event_e e : {TD_SWITCHTO, TD_SWITCHFROM, TD_PREEMPT, TD_IDLE}) {
            INFO(events::event_name(e));
            auto a = s.target().agent()->event_addr(e);
            REQUIRE_FALSE(a.has_value());
            CHECK(a.error() == TD_NOEVENT);
        }
        std::set<void*> addresses;
        for (td_event_e e : supported_events(b)) {
            INFO(events::event_name(e));
            auto a = s.target().agent()->event_addr(e);
            REQUIRE_MESSAGE(a.has_value(), td_name(a.error()));
            CHECK(a->type == NOTIFY_BPT);
            CHECK(a->u.bptaddr != nullptr);
            CHECK(addresses.insert(a->u.bptaddr).second);   // distinct
        }
        for (td_event_e e : unsupported_events(b)) {
            INFO(events::event_name(e));
            auto a = s.target().agent()->event_addr(e);
            REQUIRE_FALSE(a.has_value());
            CHECK(a.error() == TD_NOEVENT);
        }

        // Arming an event without a reporting address fails whole: nothing
        // armed, the global mask untouched.
        auto global_before = s.target().agent()->global_mask();
        REQUIRE(global_before.has_value());
        auto armed = s.arm({TD_CREATE, TD_SWITCHTO});
        REQUIRE_FALSE(armed.has_value());
        CHECK(armed.error() == TD_NOEVENT);
        CHECK_FALSE(s.watch().is_armed());
        auto global_after = s.target().agent()->global_mask();
        REQUIRE(global_after.has_value());
        CHECK(same_mask(*global_before, *global_after));
        // Nor can a stop be planted where there is no reporting address.
        auto stops = s.watch().plant_stops({TD_SWITCHTO});
        REQUIRE_FALSE(stops.has_value());
        CHECK(stops.error() == TD_NOEVENT);
        s.resume();
    });
}

TEST_CASE("detach after arm() restores the global mask, the main thread's flag and mask, and the reporting code")
{
    on_both_backends([](backend b) {
        launched_steer fx(b);
        auto& s = fx.session();
        s.interrupt();
        const auto& layout = s.target().agent()->layout();
        auto main = main_thread(s);
        const target_addr global_addr = layout.global_mask;
        const target_addr flag_addr = main.value() + layout.report_events.offset;
        const target_addr mask_addr = main.value() + layout.eventmask.offset;
        const std::size_t flag_bytes = layout.report_events.element_bytes();
        std::vector<std::pair<target_addr, std::uint64_t>> code;
        for (td_event_e e : supported_events(b)) {
            auto r = s.target().agent()->reporting_address_of(e);
            REQUIRE(r.has_value());
            code.emplace_back(r->address, std::max<std::uint64_t>(r->function_size, 2));
        }
        auto snapshot = [&] {
            std::vector<std::vector<std::uint8_t>> v{peek(fx.pid(), global_addr, sizeof(td_thr_events_t)),
                                                     peek(fx.pid(), flag_addr, flag_bytes),
                                                     peek(fx.pid(), mask_addr, sizeof(td_thr_events_t))};
            for (auto [addr, size] : code)
                v.push_back(peek(fx.pid(), addr, size));
            return v;
        };
        auto before = snapshot();
        REQUIRE(s.arm(supported_events(b)));
        s.resume();
        auto extra = fx.spawn();
        fx.release(extra);
        fx.join(extra);
        fx.pump_for(std::chrono::milliseconds(50));
        int creates = 0, deaths = 0;
        for (const auto& ev : fx.take_events()) {
            if (ev.what != core::session_event::kind::message || ev.message.tid.value != extra.tid)
                continue;
            creates += ev.message.event == TD_CREATE;
            deaths += ev.message.event == TD_DEATH;
        }
        CHECK(creates == 1);
        CHECK(deaths == 1);
        CHECK(snapshot() != before);
        s.detach();
        CHECK(test::tracer_pid(fx.pid()) == 0);
        CHECK(snapshot() == before);
        CHECK(fx.ask("ping") == "pong");
    });
}
