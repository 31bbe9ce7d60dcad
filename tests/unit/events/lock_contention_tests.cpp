// events/lock_contention on canned lock messages: no target.
#include <doctest/doctest.h>

#include "events/lock_contention.hpp"

namespace ev = tdctl::events;
using tdctl::target_addr;
using tdctl::tid_t;

namespace {

ev::event_message lock_message(td_event_e event, pid_t tid, double time, std::uint64_t lock,
                               std::optional<pid_t> owner = std::nullopt)
{
    ev::event_message m;
    m.event = event;
    m.tid = tid_t{tid};
    m.reporter = tid_t{tid};
    m.time = time;
    m.data = lock;
    m.lock_owner = owner;
    if (event == TD_SLEEP)
        m.lock = ev::lock_kind::mutex;
    else
        m.lock_owner.reset();  // read at the SLEEP only
    // As the session hands it over: the agent's frames cut off (core/lock_probe).
    m.frames = {ev::stack_frame{target_addr{0x4000 + static_cast<std::uint64_t>(tid)}, "caller", 4, "app", "", 0},
                ev::stack_frame{target_addr{0x5000}, "main", 9, "app", "", 0}};
    return m;
}

void contend(ev::lock_contention& c, pid_t tid, std::uint64_t lock, double sleep, double ready, pid_t owner)
{
    c.add(lock_message(TD_LOCK_TRY, tid, sleep - 0.001, lock, owner));
    c.add(lock_message(TD_SLEEP, tid, sleep, lock, owner));
    c.add(lock_message(TD_READY, tid, ready, lock));
}

}  // namespace

TEST_CASE("lock_contention: contentions, waits, holders, waiters and order by total wait")
{
    ev::lock_contention c;
    contend(c, 11, 0x1000, 1.0, 1.010, 12);
    contend(c, 12, 0x1000, 2.0, 2.030, 11);
    contend(c, 13, 0x2000, 3.0, 3.100, 14);
    auto r = c.report(3);
    REQUIRE(r.size() == 2);
    CHECK(r[0].address == 0x2000);  // 100 ms beats 40 ms
    CHECK(r[1].address == 0x1000);
    CHECK(r[1].contentions == 2);
    CHECK(r[1].waits == 2);
    CHECK(r[1].wait_ns == doctest::Approx(40e6).epsilon(1e-3));
    CHECK(r[1].max_wait_ns == doctest::Approx(30e6).epsilon(1e-3));
    CHECK(r[1].holders == std::map<pid_t, std::uint64_t>{{11, 1}, {12, 1}});
    CHECK(r[1].waiters == std::map<pid_t, std::uint64_t>{{11, 1}, {12, 1}});
    CHECK(r[1].kind == ev::lock_kind::mutex);
    // Two waiters, two stacks, kept as they came.
    REQUIRE(r[1].call_sites.size() == 2);
    CHECK(r[1].call_sites[0].frames.size() == 2);
    CHECK(r[1].call_sites[0].frames[0].function == "caller");
    CHECK(r[1].try_failures == 0);
    CHECK(r[1].call_sites[0].wait_ns > r[1].call_sites[1].wait_ns);
    CHECK(c.contentions() == 3);
}

TEST_CASE("lock_contention: a SLEEP/READY no LOCK_TRY opened is no lock's; holder and stack come with the SLEEP")
{
    ev::lock_contention c(1);
    c.add(lock_message(TD_SLEEP, 11, 1.0, 0x3000, 7));  // a condition variable
    c.add(lock_message(TD_READY, 11, 1.5, 0x3000));
    CHECK(c.report(3).empty());
    c.add(lock_message(TD_LOCK_TRY, 11, 2.0, 0x1000, 41));  // the try's owner is not read
    c.add(lock_message(TD_SLEEP, 11, 2.001, 0x1000, 42));
    c.add(lock_message(TD_SLEEP, 11, 2.0015, 0x1000, 43));  // a second SLEEP of one wait: ignored
    c.add(lock_message(TD_READY, 11, 2.002, 0x1000));
    auto r = c.report(3);
    REQUIRE(r.size() == 1);
    CHECK(r[0].holders == std::map<pid_t, std::uint64_t>{{42, 1}});
    CHECK(r[0].wait_ns == doctest::Approx(1e6).epsilon(1e-2));
    REQUIRE(r[0].call_sites.size() == 1);
    CHECK(r[0].call_sites[0].contentions == 1);
    CHECK(r[0].call_sites[0].frames.size() == 1);  // cut to one frame
}

TEST_CASE("lock_contention: clear() starts a new span, a wait open across it counts where it ends")
{
    ev::lock_contention c;
    c.add(lock_message(TD_LOCK_TRY, 11, 1.0, 0x1000, 12));
    c.add(lock_message(TD_SLEEP, 11, 1.0, 0x1000, 12));
    c.clear();
    c.add(lock_message(TD_READY, 11, 1.25, 0x1000));
    auto r = c.report(3);
    REQUIRE(r.size() == 1);
    CHECK(r[0].contentions == 0);
    CHECK(r[0].waits == 1);
    CHECK(r[0].wait_ns == doctest::Approx(250e6).epsilon(1e-3));
}

TEST_CASE("lock_contention: a LOCK_TRY without its READY is replaced by the thread's next one")
{
    ev::lock_contention c;
    c.add(lock_message(TD_LOCK_TRY, 11, 1.0, 0x1000, 12));
    contend(c, 11, 0x2000, 2.0, 2.5, 13);
    c.add(lock_message(TD_READY, 11, 3.0, 0x1000));  // not the open one: ignored
    auto r = c.report(3);
    REQUIRE(r.size() == 2);
    CHECK(r[0].address == 0x2000);
    CHECK(r[0].waits == 1);
    CHECK(r[1].waits == 0);
    // No SLEEP followed the first try: a trylock failure, not a contention.
    CHECK(r[1].contentions == 0);
    CHECK(r[1].try_failures == 1);
    CHECK(r[0].try_failures == 0);
}

TEST_CASE("lock_contention: trylock failures are the LOCK_TRYs no SLEEP followed, counted apart from contentions")
{
    ev::lock_contention c;
    for (int i = 0; i < 5; ++i)
        c.add(lock_message(TD_LOCK_TRY, 11, 1.0 + i * 0.01, 0x1000));
    // Its last try is still open when asked: counted, and counted once.
    CHECK(c.try_failures() == 5);
    auto r = c.report(3);
    REQUIRE(r.size() == 1);
    CHECK(r[0].try_failures == 5);
    CHECK(r[0].contentions == 0);
    CHECK(r[0].waits == 0);
    CHECK(r[0].waiters.empty());
    CHECK(r[0].call_sites.empty());
    // A blocking lock of the same thread: the next try closes the last
    // failure, its SLEEP makes it a contention.
    contend(c, 11, 0x1000, 2.0, 2.010, 12);
    r = c.report(3);
    REQUIRE(r.size() == 1);
    CHECK(r[0].try_failures == 5);
    CHECK(r[0].contentions == 1);
    CHECK(r[0].waits == 1);
    // A PRI_INHERIT between the try and the SLEEP does not close the try.
    c.add(lock_message(TD_LOCK_TRY, 12, 3.0, 0x2000));
    c.add(lock_message(TD_PRI_INHERIT, 12, 3.0, 0x2000));
    c.add(lock_message(TD_SLEEP, 12, 3.001, 0x2000, 11));
    c.add(lock_message(TD_READY, 12, 3.002, 0x2000));
    // A failure followed by a condition variable's SLEEP/READY.
    c.add(lock_message(TD_LOCK_TRY, 13, 4.0, 0x3000));
    c.add(lock_message(TD_SLEEP, 13, 4.1, 0x4000));
    c.add(lock_message(TD_READY, 13, 4.2, 0x4000));
    r = c.report(3);
    REQUIRE(r.size() == 3);
    std::map<std::uint64_t, ev::lock_stats> by;
    for (auto& s : r)
        by[s.address] = s;
    CHECK(by[0x2000].try_failures == 0);
    CHECK(by[0x2000].contentions == 1);
    CHECK(by[0x2000].pri_inherit == 1);
    CHECK(by[0x3000].try_failures == 1);
    CHECK(by[0x3000].contentions == 0);
    CHECK_FALSE(by.contains(0x4000));
    CHECK(c.try_failures() == 6);
    // --top order is unchanged: by total wait, then contentions.
    CHECK(r[0].address == 0x1000);
    CHECK(r[2].address == 0x3000);
}

TEST_CASE("lock_contention: a try open at a report counts there, not again after clear()")
{
    ev::lock_contention c;
    c.add(lock_message(TD_LOCK_TRY, 11, 1.0, 0x1000));
    REQUIRE(c.report(3).size() == 1);
    CHECK(c.report(3)[0].try_failures == 1);
    c.clear();
    c.add(lock_message(TD_LOCK_TRY, 11, 2.0, 0x1000));  // closes the reported one: not counted again
    auto r = c.report(3);
    REQUIRE(r.size() == 1);
    CHECK(r[0].try_failures == 1);
    CHECK(c.try_failures() == 1);
}
