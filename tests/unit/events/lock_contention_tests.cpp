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
    // The agent's frames first, then the caller.
    m.frames = {ev::stack_frame{target_addr{0x7000}, "__tdagent_event_lock_try", 0, "libtdagent.so", "", 0},
                ev::stack_frame{target_addr{0x7100}, "mutex_lock_reporting", 0x20, "libtdagent.so", "", 0},
                ev::stack_frame{target_addr{0x4000 + static_cast<std::uint64_t>(tid)}, "caller", 4, "app", "", 0}};
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
    // Two waiters, two stacks; the agent's frames are cut off.
    REQUIRE(r[1].call_sites.size() == 2);
    CHECK(r[1].call_sites[0].frames.size() == 1);
    CHECK(r[1].call_sites[0].frames[0].function == "caller");
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
}
