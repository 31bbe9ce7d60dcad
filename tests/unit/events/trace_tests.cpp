// The trace model (trace_recorder), its two encodings and the event summary,
// on canned event messages: no target.
#include <algorithm>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "base/clock.hpp"
#include "events/chrome_trace.hpp"
#include "events/event_summary.hpp"
#include "events/perfetto_trace.hpp"
#include "events/protobuf_writer.hpp"
#include "events/trace_recorder.hpp"

namespace ev = tdctl::events;
using tdctl::target_addr;
using tdctl::tid_t;

namespace {

ev::event_message message(td_event_e event, pid_t tid, pid_t reporter, double time, std::string name = "t",
                          std::uint64_t data = 0)
{
    ev::event_message m;
    m.event = event;
    m.tid = tid_t{tid};
    m.reporter = tid_t{reporter};
    m.time = time;
    m.name = std::move(name);
    m.handle = target_addr{0x1000u + static_cast<std::uint64_t>(tid)};
    m.data = data;
    return m;
}

int count_kind(const ev::thread_lifetime& l, ev::trace_mark::kind k)
{
    return static_cast<int>(std::count_if(l.marks.begin(), l.marks.end(), [&](const auto& m) { return m.what == k; }));
}

// Every slice of a lifetime closes, and never more ends than begins so far.
bool nests(const ev::thread_lifetime& l)
{
    int depth = 0;
    for (const auto& m : l.marks) {
        depth += m.what == ev::trace_mark::kind::begin ? 1 : m.what == ev::trace_mark::kind::end ? -1 : 0;
        if (depth < 0)
            return false;
    }
    return depth == 0;
}

}  // namespace

TEST_CASE("proto_message writes the protobuf wire format")
{
    ev::proto_message m;
    m.varint(1, 300).bytes(2, "hi").fixed64(3, 1);
    const std::string expected{"\x08\xac\x02\x12\x02hi\x19\x01\x00\x00\x00\x00\x00\x00\x00", 16};
    CHECK(m.data() == expected);
    ev::proto_message outer;
    outer.message(600, m);  // a field number above 15 takes a two-byte tag
    CHECK(outer.data().substr(0, 3) == std::string("\xc2\x25\x10", 3));
    ev::proto_message negative;
    negative.varint(4, static_cast<std::uint64_t>(std::int64_t{-1}));
    CHECK(negative.size() == 11);  // tag + ten bytes
}

TEST_CASE("a reused TID gets a second lifetime; names and the create flow follow the events")
{
    ev::trace_recorder r(100, "prog", 0.0, {{100, "prog"}});
    r.on_event(message(TD_CREATE, 101, 100, 0.1, "prog"));
    r.on_event(message(TD_DEATH, 101, 101, 0.2, "worker"));
    r.on_event(message(TD_CREATE, 101, 100, 0.3, "prog"));
    auto model = r.finish(0.5);
    REQUIRE(model.lifetimes.size() == 3);
    const auto& first = model.lifetimes[1];
    const auto& second = model.lifetimes[2];
    CHECK(first.tid == 101);
    CHECK(second.tid == 101);
    CHECK(first.uuid != second.uuid);
    CHECK(second.reuse == 1);
    CHECK(first.end == ev::lifetime_end::death);
    CHECK(first.last_name == "worker");
    CHECK(count_kind(first, ev::trace_mark::kind::rename) == 1);
    CHECK(second.end == ev::lifetime_end::at_trace_end);
    CHECK(model.lifetimes[0].start == ev::lifetime_start::at_trace_start);
    // The TD_CREATE instants are on the creator's track, each with a flow
    // ending at the lifetime it began.
    const auto& creator = model.lifetimes[0];
    std::vector<std::uint64_t> flows;
    for (const auto& m : creator.marks)
        if (m.flow_out != 0)
            flows.push_back(m.flow_out);
    REQUIRE(flows.size() == 2);
    CHECK(first.marks.front().flow_in == flows[0]);
    CHECK(second.marks.front().flow_in == flows[1]);
    for (const auto& l : model.lifetimes)
        CHECK(nests(l));
}

TEST_CASE("agent waits become nested slices, a timed-out sleep named as such")
{
    ev::trace_recorder r(1, "p", 0.0, {{1, "p"}, {2, "w"}});
    r.on_event(message(TD_LOCK_TRY, 2, 2, 0.05, "w", 0x777));  // a trylock failure: an instant only
    r.on_event(message(TD_LOCK_TRY, 2, 2, 0.1, "w", 0xabc));
    r.on_event(message(TD_SLEEP, 2, 2, 0.1, "w", 0xabc));
    r.on_event(message(TD_READY, 2, 2, 0.2, "w", 0xabc));
    r.on_event(message(TD_SLEEP, 2, 2, 0.3, "w", 0xdef));
    r.on_event(message(TD_TIMEOUT, 2, 2, 0.4, "w", 0xdef));
    r.on_event(message(TD_READY, 2, 2, 0.4, "w", 0xdef));
    r.on_event(message(TD_SLEEP, 2, 2, 0.45, "w", 0x123));  // never ready: ends with the thread
    r.on_event(message(TD_DEATH, 2, 2, 0.5, "w"));
    auto model = r.finish(0.6);
    const auto& w = model.lifetimes[1];
    CHECK(nests(w));
    std::vector<std::string> begun;
    for (const auto& m : w.marks)
        if (m.what == ev::trace_mark::kind::begin)
            begun.push_back(m.name);
    CHECK(begun == std::vector<std::string>{"thread", "lock wait", "sleep", "sleep (timed out)", "sleep"});
    CHECK(count_kind(w, ev::trace_mark::kind::instant) == 9);
    // The lock wait begins at its try, not at the sleep.
    for (const auto& m : w.marks)
        if (m.what == ev::trace_mark::kind::begin && m.name == "lock wait")
            CHECK(m.ts_ns == tdctl::monotonic_ns_at(0.1));
    CHECK(w.end == ev::lifetime_end::death);
}

TEST_CASE("listings begin and end lifetimes whose birth or death was not watched")
{
    ev::trace_recorder r(1, "p", 0.0, {{1, "p"}, {2, "a"}});
    r.observe(0.1, {{1, "p"}, {3, "b"}});
    r.on_event(message(TD_CREATE, 4, 1, 0.2, "p"));
    r.observe(0.25, {{1, "p"}, {3, "b"}, {4, "c"}});
    auto model = r.finish(0.3);
    REQUIRE(model.lifetimes.size() == 4);
    CHECK(model.lifetimes[1].end == ev::lifetime_end::gone);
    CHECK(model.lifetimes[2].start == ev::lifetime_start::first_seen);
    CHECK(model.lifetimes[3].last_name == "c");
    for (const auto& l : model.lifetimes) {
        CHECK(nests(l));
        for (std::size_t i = 1; i < l.marks.size(); ++i)
            CHECK(l.marks[i - 1].ts_ns <= l.marks[i].ts_ns);
    }
}

TEST_CASE("the Chrome JSON keeps reused TIDs apart and has one B/E pair per lifetime")
{
    ev::trace_recorder r(100, "prog", 0.0, {{100, "prog"}});
    r.on_event(message(TD_CREATE, 101, 100, 0.1));
    r.on_event(message(TD_DEATH, 101, 101, 0.2));
    r.on_event(message(TD_CREATE, 101, 100, 0.3));
    auto doc = nlohmann::json::parse(ev::chrome_trace_json(r.finish(0.4)));
    int begins = 0, ends = 0, instants = 0;
    std::vector<std::int64_t> tids;
    for (const auto& e : doc["traceEvents"]) {
        const std::string ph = e["ph"];
        begins += ph == "B";
        ends += ph == "E";
        instants += ph == "i";
        if (ph == "M" && e["name"] == "thread_name")
            tids.push_back(e["tid"]);
    }
    CHECK(begins == 3);
    CHECK(ends == 3);
    CHECK(instants == 3);
    CHECK(tids.size() == 3);
    std::sort(tids.begin(), tids.end());
    CHECK(std::adjacent_find(tids.begin(), tids.end()) == tids.end());
}

TEST_CASE("the Perfetto trace starts with the clock snapshot and is one Trace message")
{
    ev::trace_recorder r(100, "prog", 0.0, {{100, "prog"}});
    r.on_event(message(TD_CREATE, 101, 100, 0.1));
    const std::string bytes = ev::perfetto_trace_bytes(r.finish(0.2));
    REQUIRE(bytes.size() > 4);
    CHECK(static_cast<unsigned char>(bytes[0]) == 0x0a);  // field 1 (packet), length-delimited
}

TEST_CASE("the summary counts per call site and start routine, and a mark splits off one command")
{
    ev::event_summary s([](const ev::event_message& m) { return m.handle.value * 2; });
    auto created = [&](pid_t tid, std::uint64_t site, double t) {
        auto m = message(TD_CREATE, tid, 1, t);
        m.call_site = target_addr{site};
        s.write(m);
    };
    created(10, 0xa, 0.0);
    created(11, 0xa, 0.0);
    s.write(message(TD_DEATH, 10, 10, 0.001));
    const auto mark = s.mark();
    created(12, 0xb, 0.01);
    s.write(message(TD_DEATH, 12, 12, 0.013));
    s.write(message(TD_DEATH, 11, 11, 0.02));
    auto all = s.counts();
    CHECK(all.messages == 6);
    CHECK(all.per_event[TD_CREATE] == 3);
    CHECK(all.per_event[TD_DEATH] == 3);
    REQUIRE(all.call_sites.size() == 2);
    CHECK(all.call_sites[0].call_site == 0xa);
    CHECK(all.call_sites[0].created == 2);
    CHECK(all.call_sites[0].ended == 2);
    CHECK(all.created_alive == 0);
    auto tail = s.counts(mark);
    CHECK(tail.messages == 3);
    CHECK(tail.created == 1);
    CHECK(tail.ended == 2);
    REQUIRE(tail.call_sites.size() == 1);
    CHECK(tail.call_sites[0].ended == 1);
    REQUIRE(tail.lifetimes.size() == 1);
    CHECK(tail.lifetimes[0].start_routine == 2 * (0x1000u + 12));
    CHECK(tail.lifetimes[0].min_ns >= 2900000);
    CHECK(tail.lifetimes[0].max_ns <= 3100000);
}

TEST_CASE("percentile is the nearest rank")
{
    std::vector<std::uint64_t> v{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    CHECK(ev::percentile(v, 0.5) == 5);
    CHECK(ev::percentile(v, 0.95) == 10);
    CHECK(ev::percentile({7}, 0.95) == 7);
    CHECK(ev::percentile({}, 0.5) == 0);
}

TEST_CASE("a thread listed between its clone and its TD_CREATE keeps one lifetime, counted as created")
{
    ev::trace_recorder r(1, "p", 0.0, {{1, "p"}});
    r.observe(0.1, {{1, "p"}, {2, "p"}});  // a watch starts while 2 is being created
    r.on_event(message(TD_CREATE, 2, 1, 0.11, "p"));
    r.on_event(message(TD_DEATH, 2, 2, 0.2, "p"));
    auto model = r.finish(0.3);
    REQUIRE(model.lifetimes.size() == 2);
    CHECK(model.lifetimes[1].start == ev::lifetime_start::created);
    CHECK(model.lifetimes[1].end == ev::lifetime_end::death);
    CHECK(count_kind(model.lifetimes[1], ev::trace_mark::kind::instant) == 1);  // its TD_DEATH
    CHECK(count_kind(model.lifetimes[0], ev::trace_mark::kind::instant) == 1);  // the TD_CREATE
}

TEST_CASE("messages of a thread after its TD_DEATH go on the process track")
{
    ev::trace_recorder r(1, "p", 0.0, {{1, "p"}, {2, "w"}});
    r.on_event(message(TD_DEATH, 2, 2, 0.1, "w"));
    r.on_event(message(TD_CONCURRENCY, 2, 2, 0.1, "w"));
    auto model = r.finish(0.2);
    REQUIRE(model.process_marks.size() == 1);
    CHECK(model.process_marks[0].name == "TD_CONCURRENCY");
}

TEST_CASE("seconds_at_monotonic_ns: a CLOCK_MONOTONIC time on the seconds_since_start scale, the inverse of monotonic_ns_at")
{
    for (double s : {0.0, 0.001, 1.5, 3600.25})
        CHECK(tdctl::seconds_at_monotonic_ns(tdctl::monotonic_ns_at(s)) == doctest::Approx(s).epsilon(1e-12));
    // A time read now lies between two seconds_since_start() around it.
    const double before = tdctl::seconds_since_start();
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    const double after = tdctl::seconds_since_start();
    const double at = tdctl::seconds_at_monotonic_ns(static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u +
                                                     static_cast<std::uint64_t>(ts.tv_nsec));
    CHECK(at >= before - 1e-9);
    CHECK(at <= after + 1e-9);
    // Before tdctl started: negative.
    CHECK(tdctl::seconds_at_monotonic_ns(tdctl::monotonic_ns_at(0.0) - 2000000000u) == doctest::Approx(-2.0));
}
