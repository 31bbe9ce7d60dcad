// Event names both ways and the comma-list parser, on canned input.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "events/event_names.hpp"
#include "events/event_set.hpp"
#include "glibc_event_macros.h"

namespace ev = tdctl::events;
using tdctl::events::operator==;

namespace {

struct expected_name {
    td_event_e event;
    int number;  // spelled out so a reordered table cannot go unnoticed
    const char* name;
    const char* short_name;
};

const expected_name expected_names[] = {
    {TD_READY, 1, "TD_READY", "ready"},
    {TD_SLEEP, 2, "TD_SLEEP", "sleep"},
    {TD_SWITCHTO, 3, "TD_SWITCHTO", "switchto"},
    {TD_SWITCHFROM, 4, "TD_SWITCHFROM", "switchfrom"},
    {TD_LOCK_TRY, 5, "TD_LOCK_TRY", "lock_try"},
    {TD_CATCHSIG, 6, "TD_CATCHSIG", "catchsig"},
    {TD_IDLE, 7, "TD_IDLE", "idle"},
    {TD_CREATE, 8, "TD_CREATE", "create"},
    {TD_DEATH, 9, "TD_DEATH", "death"},
    {TD_PREEMPT, 10, "TD_PREEMPT", "preempt"},
    {TD_PRI_INHERIT, 11, "TD_PRI_INHERIT", "pri_inherit"},
    {TD_REAP, 12, "TD_REAP", "reap"},
    {TD_CONCURRENCY, 13, "TD_CONCURRENCY", "concurrency"},
    {TD_TIMEOUT, 14, "TD_TIMEOUT", "timeout"},
};

std::string upper(std::string s) {
    for (auto& c : s) {
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    return s;
}

std::vector<td_event_e> list(std::initializer_list<td_event_e> events) { return events; }

}  // namespace

TEST_CASE("all_events lists the 14 events in numeric order") {
    const auto& all = ev::all_events();
    REQUIRE(all.size() == 14);
    for (std::size_t i = 0; i < all.size(); ++i) {
        CAPTURE(i);
        CHECK(static_cast<int>(all[i]) == static_cast<int>(i) + 1);
    }
    CHECK(all.front() == TD_MIN_EVENT_NUM);
    CHECK(all.back() == TD_MAX_EVENT_NUM);
}

TEST_CASE("names both ways for every event") {
    for (const auto& x : expected_names) {
        CAPTURE(x.name);
        CHECK(static_cast<int>(x.event) == x.number);
        CHECK(ev::event_name(x.event) == x.name);
        CHECK(ev::event_short_name(x.event) == x.short_name);
        CHECK(ev::event_name(x.event) == "TD_" + upper(x.short_name));

        CHECK(ev::parse_event(x.name) == x.event);
        CHECK(ev::parse_event(x.short_name) == x.event);
        CHECK(ev::parse_event(upper(x.short_name)) == x.event);
        CHECK(ev::parse_event(std::string{"td_"} + x.short_name) == x.event);
        CHECK(ev::parse_event(std::string{"Td_"} + x.short_name) == x.event);
        CHECK(ev::parse_event(std::string{"  "} + x.short_name + "\t") == x.event);

        const auto one = ev::parse_event_list(x.name);
        REQUIRE(one.has_value());
        CHECK(*one == list({x.event}));
    }
}

TEST_CASE("names for numbers outside the enum") {
    CHECK(ev::event_name(static_cast<td_event_e>(0)) == "TD_EVENT_NONE");
    CHECK(ev::event_name(static_cast<td_event_e>(15)) == "TD_EVENT_15");
    CHECK(ev::event_name(static_cast<td_event_e>(99)) == "TD_EVENT_99");
    CHECK(ev::event_name(static_cast<td_event_e>(-3)) == "TD_EVENT_-3");
    CHECK(ev::event_short_name(static_cast<td_event_e>(0)) == "none");
    CHECK(ev::event_short_name(static_cast<td_event_e>(31)) == "event_31");
}

TEST_CASE("parse_event rejects what is not one event") {
    for (const char* bad : {"", " ", "td_", "TD_", "creat", "createx", "td_td_create", "all", "none", "8",
                            "lock try", "lock-try", "create,death", "TD_EVENT_NONE", "_create"}) {
        CAPTURE(bad);
        CHECK_FALSE(ev::parse_event(bad).has_value());
    }
}

TEST_CASE("parse_event_list variants") {
    SUBCASE("case and prefix") {
        const auto r = ev::parse_event_list("Create,TD_DEATH,td_Reap,LOCK_TRY");
        REQUIRE(r.has_value());
        CHECK(*r == list({TD_LOCK_TRY, TD_CREATE, TD_DEATH, TD_REAP}));
    }
    SUBCASE("spaces around items") {
        const auto r = ev::parse_event_list("  TD_CREATE ,  death\t,timeout ");
        REQUIRE(r.has_value());
        CHECK(*r == list({TD_CREATE, TD_DEATH, TD_TIMEOUT}));
    }
    SUBCASE("numeric order whatever the input order") {
        const auto r = ev::parse_event_list("timeout,ready,concurrency,sleep");
        REQUIRE(r.has_value());
        CHECK(*r == list({TD_READY, TD_SLEEP, TD_CONCURRENCY, TD_TIMEOUT}));
    }
    SUBCASE("duplicates collapse") {
        const auto r = ev::parse_event_list("create,CREATE,td_create, create ,death,create");
        REQUIRE(r.has_value());
        CHECK(*r == list({TD_CREATE, TD_DEATH}));
    }
    SUBCASE("all") {
        for (const char* text : {"all", "ALL", " all ", "TD_ALL_EVENTS", "create,all", "all,all"}) {
            CAPTURE(text);
            const auto r = ev::parse_event_list(text);
            REQUIRE(r.has_value());
            CHECK(*r == ev::all_events());
        }
    }
    SUBCASE("none parses back to nothing") {
        const auto r = ev::parse_event_list("none");
        REQUIRE(r.has_value());
        CHECK(r->empty());
    }
}

TEST_CASE("parse_event_list errors name the problem and list the valid names") {
    auto check_lists_names = [](const std::string& msg) {
        for (const auto& x : expected_names) {
            CAPTURE(x.short_name);
            CHECK(msg.find(x.short_name) != std::string::npos);
        }
        CHECK(msg.find("all") != std::string::npos);
    };

    SUBCASE("unknown word") {
        const auto r = ev::parse_event_list("create,bogus,death");
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().find("'bogus'") != std::string::npos);
        check_lists_names(r.error());
    }
    SUBCASE("unknown word keeps the user's spelling") {
        const auto r = ev::parse_event_list("TD_Frobnicate");
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().find("TD_Frobnicate") != std::string::npos);
    }
    SUBCASE("empty item in the middle") {
        const auto r = ev::parse_event_list("create,,death");
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().find("empty") != std::string::npos);
        check_lists_names(r.error());
    }
    SUBCASE("blank item") {
        const auto r = ev::parse_event_list("create, ,death");
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().find("empty") != std::string::npos);
    }
    SUBCASE("trailing comma") {
        const auto r = ev::parse_event_list("create,");
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().find("empty") != std::string::npos);
    }
    SUBCASE("leading comma") {
        CHECK_FALSE(ev::parse_event_list(",create").has_value());
    }
    SUBCASE("nothing at all") {
        for (const char* text : {"", "   ", ","}) {
            CAPTURE(text);
            const auto r = ev::parse_event_list(text);
            REQUIRE_FALSE(r.has_value());
            check_lists_names(r.error());
        }
    }
    SUBCASE("space is not a separator") {
        const auto r = ev::parse_event_list("create death");
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().find("'create death'") != std::string::npos);
    }
    SUBCASE("a 10 kB word is quoted by its first 80 bytes, never whole") {
        const std::string word(10240, 'x');
        for (const std::string& text : {word, "create," + word, word + ",,"}) {
            const auto r = ev::parse_event_list(text);
            REQUIRE_FALSE(r.has_value());
            CHECK(r.error().find(std::string(70, 'x') + "...' (") != std::string::npos);
            CHECK(r.error().size() < 600);
        }
    }
}

TEST_CASE("lists and sets convert both ways with glibc's layout") {
    const auto set = ev::to_event_set(list({TD_CREATE, TD_DEATH, TD_TIMEOUT, TD_CREATE}));
    td_thr_events_t expect;
    glibc_event_emptyset(&expect);
    glibc_event_addset(&expect, TD_CREATE);
    glibc_event_addset(&expect, TD_DEATH);
    glibc_event_addset(&expect, TD_TIMEOUT);
    CHECK(set == expect);
    CHECK(ev::from_event_set(set) == list({TD_CREATE, TD_DEATH, TD_TIMEOUT}));

    // Each event alone survives the round trip, through glibc's macro too.
    for (auto e : ev::all_events()) {
        CAPTURE(ev::event_name(e));
        td_thr_events_t one;
        glibc_event_emptyset(&one);
        glibc_event_addset(&one, e);
        CHECK(ev::from_event_set(one) == list({e}));
        CHECK(ev::to_event_set(list({e})) == one);
    }

    // Bits beyond TD_TIMEOUT (e.g. glibc's fillset, TD_EVENTS_ENABLE) are not events.
    td_thr_events_t full;
    glibc_event_fillset(&full);
    CHECK(ev::from_event_set(full) == ev::all_events());
    td_thr_events_t high{{1U << 30, 0xffffffffU}};
    CHECK(ev::from_event_set(high).empty());
}

TEST_CASE("format_event_set") {
    td_thr_events_t empty;
    glibc_event_emptyset(&empty);
    CHECK(ev::format_event_set(empty) == "none");
    CHECK(ev::format_event_set(ev::to_event_set(list({TD_DEATH, TD_CREATE}))) == "create,death");
    CHECK(ev::format_event_set(ev::to_event_set(list({TD_LOCK_TRY, TD_PRI_INHERIT}))) == "lock_try,pri_inherit");
    CHECK(ev::format_event_set(ev::to_event_set(ev::all_events())) == "all");
    td_thr_events_t full;
    glibc_event_fillset(&full);
    CHECK(ev::format_event_set(full) == "all");

    // What format prints, parse reads back.
    for (const auto& l : {list({}), list({TD_CREATE}), list({TD_READY, TD_REAP, TD_TIMEOUT}), ev::all_events()}) {
        const auto text = ev::format_event_set(ev::to_event_set(l));
        CAPTURE(text);
        const auto back = ev::parse_event_list(text);
        REQUIRE(back.has_value());
        CHECK(*back == l);
    }
}

TEST_CASE("valid_event_names lists every short name in order") {
    const auto names = ev::valid_event_names();
    std::size_t pos = 0;
    for (const auto& x : expected_names) {
        CAPTURE(x.short_name);
        const auto at = names.find(x.short_name, pos);
        REQUIRE(at != std::string::npos);
        pos = at;
    }
}
