// The text of records that print a count before a noun: one of a thing is
// singular ("1 contention", not "1 contentions").
#include <doctest/doctest.h>

#include <string>

#include "cmd/lock_view.hpp"
#include "cmd/records.hpp"

using namespace tdctl;
using namespace tdctl::cmd;

namespace {

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

lock_record lock_with_site_contentions(std::uint64_t n)
{
    lock_record rec;
    rec.report = 1;
    rec.rank = 1;
    rec.stats.address = 0x1000;
    rec.stats.contentions = n;
    rec.stats.waits = n;
    rec.stats.call_sites.push_back(events::lock_call_site{{}, n, 1000});
    rec.stats.call_site_count = 1;
    return rec;
}

}  // namespace

TEST_CASE("count_of: singular for one, plural otherwise")
{
    CHECK(count_of(0, "thread") == "0 threads");
    CHECK(count_of(1, "thread") == "1 thread");
    CHECK(count_of(2, "GOT slot") == "2 GOT slots");
}

TEST_CASE("locks: a call site with one contention says so in the singular")
{
    const std::string one = lock_with_site_contentions(1).text();
    INFO(one);
    CHECK(contains(one, "call site 1 of 1: 1 contention, wait"));
    CHECK_FALSE(contains(one, "1 contentions"));
    const std::string two = lock_with_site_contentions(2).text();
    INFO(two);
    CHECK(contains(two, "call site 1 of 1: 2 contentions, wait"));
}

TEST_CASE("agent routing notes: one slot is a slot")
{
    routing_record routed{1, core::routing_note{core::routing_note::kind::routed, "libx.so", 1, {}}, 0.0};
    CHECK(routed.text() == "agent: routed 1 slot in libx.so (loaded after attach)");
    routed.note.slots = 3;
    CHECK(routed.text() == "agent: routed 3 slots in libx.so (loaded after attach)");
    routing_record unloaded{1, core::routing_note{core::routing_note::kind::unloaded, "libx.so", 1, {}}, 0.0};
    CHECK(contains(unloaded.text(), "its 1 routed slot dropped from the journal"));
}

// An attach after a session killed before its detach found every slot
// routed already, and said "0 GOT slots in 0 modules routed to the agent".
TEST_CASE("the start record says how many GOT slots were routed to the agent already")
{
    session_start_record rec;
    rec.pid = 42;
    rec.name = "prog";
    rec.threads = 2;
    rec.library.found = true;
    rec.library.backend = "tdagent";
    rec.library.version = "1";
    rec.routed = session_start_record::routing_counts{0, 0, 13};
    CHECK(contains(rec.text(), "0 GOT slots in 0 modules routed to the agent (13 routed already)"));
    rec.routed = session_start_record::routing_counts{5, 2, 0};
    CHECK(contains(rec.text(), "5 GOT slots in 2 modules routed to the agent"));
    CHECK_FALSE(contains(rec.text(), "already"));
}

TEST_CASE("time split: a folded row of one thread is one thread")
{
    time_split_record rest{"watch", 1, 0, {}, 1, false, false, 0.1, 0.0, 0.9, 1.0, 2.0};
    CHECK(contains(rest.text(), "watch: 1 more thread: on CPU"));
    rest.folded = 40;
    CHECK(contains(rest.text(), "watch: 40 more threads: on CPU"));
}
