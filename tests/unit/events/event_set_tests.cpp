// Our event-set functions against glibc's <thread_db.h> macros (the oracle,
// compiled separately in glibc_event_macros.c), for every event number.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "events/event_set.hpp"
#include "glibc_event_macros.h"

#if defined(td_event_emptyset) || defined(td_event_fillset) || defined(td_event_addset) || \
    defined(td_event_delset) || defined(td_eventismember) || defined(td_eventisempty)
#error "events/event_set.hpp must remove glibc's macros, or the calls below would not reach our functions"
#endif

namespace ev = tdctl::events;
using tdctl::events::operator==;

namespace {

td_event_e event_n(int n) { return static_cast<td_event_e>(n); }

// Deterministic bit patterns, so a failure reproduces.
std::vector<td_thr_events_t> sample_sets() {
    std::vector<td_thr_events_t> sets;
    std::uint64_t state = 0x9e3779b97f4a7c15ULL;
    auto next = [&] {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        return state;
    };
    const std::uint32_t fixed[][2] = {
        {0, 0}, {0xffffffffU, 0xffffffffU}, {1, 0}, {0, 1}, {0x80000000U, 0}, {0, 0x80000000U},
        {0x3fff, 0},  // TD_READY..TD_TIMEOUT exactly
        {0xaaaaaaaaU, 0x55555555U},
    };
    for (const auto& f : fixed) sets.push_back(td_thr_events_t{{f[0], f[1]}});
    for (int i = 0; i < 24; ++i) {
        const auto r = next();
        sets.push_back(td_thr_events_t{{static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(r >> 32)}});
    }
    return sets;
}

std::string bits(const td_thr_events_t& s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "{%08x,%08x}", s.event_bits[0], s.event_bits[1]);
    return buf;
}

}  // namespace

TEST_CASE("layout matches glibc's header") {
    CHECK(glibc_eventsize() == TD_EVENTSIZE);
    CHECK(ev::event_set_capacity == 64);
    CHECK(sizeof(td_thr_events_t) == TD_EVENTSIZE * sizeof(std::uint32_t));
}

TEST_CASE("emptyset and fillset match glibc on any previous contents") {
    for (const auto& start : sample_sets()) {
        CAPTURE(bits(start));
        td_thr_events_t ours = start, theirs = start;
        ev::td_event_emptyset(ours);
        glibc_event_emptyset(&theirs);
        CHECK(ours == theirs);
        CHECK(ours.event_bits[0] == 0);
        CHECK(ours.event_bits[1] == 0);

        ours = start;
        theirs = start;
        ev::td_event_fillset(ours);
        glibc_event_fillset(&theirs);
        CHECK(ours == theirs);
        CHECK(ours.event_bits[0] == 0xffffffffU);
        CHECK(ours.event_bits[1] == 0xffffffffU);
    }
}

TEST_CASE("addset sets exactly glibc's bit for every event number") {
    for (int n = 1; n <= ev::event_set_capacity; ++n) {
        CAPTURE(n);
        td_thr_events_t ours, theirs;
        ev::td_event_emptyset(ours);
        glibc_event_emptyset(&theirs);
        ev::td_event_addset(ours, event_n(n));
        glibc_event_addset(&theirs, n);
        CHECK(bits(ours) == bits(theirs));

        // The documented layout, independently of both implementations.
        const int word = (n - 1) / 32;
        const std::uint32_t mask = std::uint32_t{1} << ((n - 1) % 32);
        CHECK(ours.event_bits[word] == mask);
        CHECK(ours.event_bits[1 - word] == 0);
    }
}

TEST_CASE("word boundaries") {
    td_thr_events_t s;
    ev::td_event_emptyset(s);
    ev::td_event_addset(s, event_n(32));
    CHECK(s.event_bits[0] == 0x80000000U);
    CHECK(s.event_bits[1] == 0);
    ev::td_event_addset(s, event_n(33));
    CHECK(s.event_bits[1] == 1);
    ev::td_event_addset(s, event_n(64));
    CHECK(s.event_bits[1] == 0x80000001U);
    ev::td_event_addset(s, TD_READY);
    CHECK(s.event_bits[0] == 0x80000001U);
    ev::td_event_delset(s, event_n(32));
    CHECK(s.event_bits[0] == 1);
    CHECK(s.event_bits[1] == 0x80000001U);
    CHECK(ev::td_eventismember(s, event_n(33)));
    CHECK_FALSE(ev::td_eventismember(s, event_n(32)));
    CHECK(ev::td_eventismember(s, event_n(64)));
}

TEST_CASE("add, del and ismember match glibc on many sets and every event number") {
    for (const auto& start : sample_sets()) {
        for (int n = 1; n <= ev::event_set_capacity; ++n) {
            CAPTURE(bits(start));
            CAPTURE(n);
            CHECK(ev::td_eventismember(start, event_n(n)) == (glibc_eventismember(&start, n) != 0));

            td_thr_events_t ours = start, theirs = start;
            ev::td_event_addset(ours, event_n(n));
            glibc_event_addset(&theirs, n);
            REQUIRE(bits(ours) == bits(theirs));
            CHECK(ev::td_eventismember(ours, event_n(n)));
            CHECK(glibc_eventismember(&theirs, n) != 0);

            ours = start;
            theirs = start;
            ev::td_event_delset(ours, event_n(n));
            glibc_event_delset(&theirs, n);
            REQUIRE(bits(ours) == bits(theirs));
            CHECK_FALSE(ev::td_eventismember(ours, event_n(n)));
            CHECK(glibc_eventismember(&theirs, n) == 0);
        }
    }
}

TEST_CASE("isempty matches glibc") {
    for (const auto& s : sample_sets()) {
        CAPTURE(bits(s));
        CHECK(ev::td_eventisempty(s) == (glibc_eventisempty(&s) != 0));
    }
    // Every single-bit set is non-empty, in either word.
    for (int n = 1; n <= ev::event_set_capacity; ++n) {
        CAPTURE(n);
        td_thr_events_t s;
        glibc_event_emptyset(&s);
        glibc_event_addset(&s, n);
        CHECK_FALSE(ev::td_eventisempty(s));
        glibc_event_delset(&s, n);
        CHECK(ev::td_eventisempty(s));
    }
}

TEST_CASE("building a set one event at a time tracks glibc") {
    td_thr_events_t ours, theirs;
    ev::td_event_emptyset(ours);
    glibc_event_emptyset(&theirs);
    for (int n = 1; n <= ev::event_set_capacity; ++n) {
        CAPTURE(n);
        ev::td_event_addset(ours, event_n(n));
        glibc_event_addset(&theirs, n);
        REQUIRE(bits(ours) == bits(theirs));
    }
    td_thr_events_t full;
    glibc_event_fillset(&full);
    CHECK(ours == full);
    for (int n = ev::event_set_capacity; n >= 1; n -= 3) {
        CAPTURE(n);
        ev::td_event_delset(ours, event_n(n));
        glibc_event_delset(&theirs, n);
        REQUIRE(bits(ours) == bits(theirs));
    }
}

TEST_CASE("numbers the set cannot hold are ignored, not written out of bounds") {
    // An array with guards on both sides catches a stray write.
    struct guarded {
        std::uint32_t before;
        td_thr_events_t set;
        std::uint32_t after;
    } g{0, {{0, 0}}, 0};
    for (int n : {0, -1, 65, 96, 1000}) {
        CAPTURE(n);
        ev::td_event_addset(g.set, event_n(n));
        CHECK_FALSE(ev::td_eventismember(g.set, event_n(n)));
        CHECK(ev::td_eventisempty(g.set));
    }
    ev::td_event_fillset(g.set);
    for (int n : {0, -1, 65, 96, 1000}) {
        ev::td_event_delset(g.set, event_n(n));
        CHECK_FALSE(ev::td_eventismember(g.set, event_n(n)));
    }
    CHECK(g.set.event_bits[0] == 0xffffffffU);
    CHECK(g.set.event_bits[1] == 0xffffffffU);
    CHECK(g.before == 0);
    CHECK(g.after == 0);
}

TEST_CASE("pointer forms behave like the reference forms") {
    td_thr_events_t s;
    ev::td_event_fillset(&s);
    CHECK_FALSE(ev::td_eventisempty(&s));
    ev::td_event_emptyset(&s);
    CHECK(ev::td_eventisempty(&s));
    ev::td_event_addset(&s, TD_DEATH);
    CHECK(ev::td_eventismember(&s, TD_DEATH));
    CHECK(s.event_bits[0] == (1U << (TD_DEATH - 1)));
    ev::td_event_delset(&s, TD_DEATH);
    CHECK(ev::td_eventisempty(&s));
}

TEST_CASE("make_event_set, union, difference, equality") {
    const auto a = ev::make_event_set({TD_CREATE, TD_DEATH});
    const auto b = ev::make_event_set({TD_DEATH, TD_TIMEOUT, event_n(40)});

    td_thr_events_t expect_a;
    glibc_event_emptyset(&expect_a);
    glibc_event_addset(&expect_a, TD_CREATE);
    glibc_event_addset(&expect_a, TD_DEATH);
    CHECK(a == expect_a);

    const auto u = ev::event_union(a, b);
    CHECK(u.event_bits[0] == (a.event_bits[0] | b.event_bits[0]));
    CHECK(u.event_bits[1] == (1U << 7));  // event 40 -> word 1, bit 7
    for (auto e : {TD_CREATE, TD_DEATH, TD_TIMEOUT, event_n(40)}) CHECK(ev::td_eventismember(u, e));

    const auto d = ev::event_difference(u, ev::make_event_set({TD_DEATH, event_n(40)}));
    CHECK(d == ev::make_event_set({TD_CREATE, TD_TIMEOUT}));
    CHECK_FALSE(d == u);
    CHECK_FALSE(ev::make_event_set({event_n(33)}) == ev::make_event_set({TD_READY}));
}
