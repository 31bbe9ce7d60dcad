// Conformance with the system libthread_db.so.1 (SPEC §2.1, §9 "Results
// agree with the system libthread_db.so.1 wherever both answer"): glibc's own
// nptl_db, hosted in this program over the same held target as tdctl's
// thread agent, must give the same event addresses, thread list, thread
// information and LWP mapping; each side must read the event state the other
// wrote; and getmsg must yield the same messages, apart from the two
// deliberate differences of SPEC §2.1 (glibc's consume wipes the thread's
// mask; glibc's td_thr_event_getmsg cannot unlink a thread below the head).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <dlfcn.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "core/session/session.hpp"
#include "core/thread_handle.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"
#include "tests/conformance/steer_driver.hpp"
#include "tests/conformance/thread_db_host.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::conformance;

namespace {

// Everything a test needs before any process starts: ptrace works here and
// the oracle loads (else the program is skipped with 77).
thread_db_library& oracle_or_skip()
{
    test::require_ptrace();
    return thread_db_library::get_or_skip();
}

std::unique_ptr<core::session> attach(steer_fixture& fx)
{
    auto s = core::session::attach(fx.pid());
    REQUIRE_MESSAGE(s->target().agent() != nullptr, "no thread agent: ", s->target().no_agent_reason());
    REQUIRE(s->target().agent()->backend() == "nptl");
    return s;
}

std::string hex(target_addr a)
{
    return fmt::format("{}", a);
}

// The fields SPEC §3 has td_thr_get_info fill, compared one by one.
void check_same_info(const td_thrinfo_t& ours, const td_thrinfo_t& glibc, target_addr handle)
{
    INFO("thread ", hex(handle));
    CHECK(ours.ti_tid == glibc.ti_tid);
    CHECK(ours.ti_lid == glibc.ti_lid);
    CHECK(ours.ti_startfunc == glibc.ti_startfunc);
    CHECK(ours.ti_traceme == glibc.ti_traceme);
    CHECK_MESSAGE(same_mask(ours.ti_events, glibc.ti_events), "ours ", describe_mask(ours.ti_events), " glibc ",
                  describe_mask(glibc.ti_events));
    CHECK(ours.ti_state == glibc.ti_state);
    CHECK(ours.ti_type == glibc.ti_type);
}

struct info_pair {
    td_thrinfo_t ours;
    td_thrinfo_t glibc;
};

// get_info of one thread on both sides; REQUIREs both to succeed.
info_pair both_infos(core::session& s, thread_db_agent& oracle, target_addr handle)
{
    auto ours = handle_in(s, handle).get_info();
    REQUIRE_MESSAGE(ours.has_value(), "our get_info(", hex(handle), "): ", td_name(ours.error()));
    auto glibc = oracle.get_info(handle);
    REQUIRE_MESSAGE(glibc.has_value(), "glibc td_thr_get_info(", hex(handle), "): ", td_name(glibc.error()));
    return {*ours, *glibc};
}

// Compares get_info of every thread on both sides and returns ours by handle.
std::map<target_addr, td_thrinfo_t> compare_all_infos(core::session& s, thread_db_agent& oracle)
{
    auto ours = s.target().agent()->thr_iter();
    REQUIRE(ours.has_value());
    std::map<target_addr, td_thrinfo_t> out;
    for (const auto& th : *ours) {
        auto p = both_infos(s, oracle, th.value());
        check_same_info(p.ours, p.glibc, th.value());
        out[th.value()] = p.ours;
    }
    return out;
}

// The start of the first mapping of `file_name` (offset 0) in a process.
std::optional<std::uint64_t> module_base(pid_t pid, std::string_view file_name)
{
    for (const auto& m : test::proc_maps(pid)) {
        if (m.offset == 0 && !m.path.empty() &&
            std::string_view(m.path).substr(m.path.find_last_of('/') + 1) == file_name)
            return m.start;
    }
    return std::nullopt;
}

}  // namespace

TEST_CASE("td_ta_event_addr: the same reporting addresses as libthread_db, TD_NOEVENT for the rest")
{
    auto& lib = oracle_or_skip();
    steer_fixture fx;
    auto s = attach(fx);
    s->interrupt();
    thread_db_agent oracle(lib, s->target());

    for (int n = TD_MIN_EVENT_NUM; n <= TD_MAX_EVENT_NUM; ++n) {
        auto e = static_cast<td_event_e>(n);
        INFO(events::event_name(e));
        auto ours = s->target().agent()->event_addr(e);
        auto glibc = oracle.event_addr(e);
        REQUIRE(ours.has_value() == glibc.has_value());
        if (!glibc) {
            CHECK(glibc.error() == TD_NOEVENT);
            CHECK(ours.error() == glibc.error());
            continue;
        }
        CHECK(ours->type == NOTIFY_BPT);
        CHECK(ours->type == glibc->type);
        CHECK(ours->u.bptaddr == glibc->u.bptaddr);
    }
    // nptl reports exactly these two.
    CHECK(s->target().agent()->event_addr(TD_CREATE).has_value());
    CHECK(s->target().agent()->event_addr(TD_DEATH).has_value());
    CHECK(oracle.event_addr(TD_SLEEP).error() == TD_NOEVENT);
    CHECK(s->target().agent()->event_addr(TD_SLEEP).error() == TD_NOEVENT);

    // Both sides above resolved names through tdctl's symbol tables; check the
    // addresses once more against this process's own copy of the same libc:
    // same file, so the same offset from the module's base.
    for (auto [e, name] : {std::pair{TD_CREATE, "__nptl_create_event"}, std::pair{TD_DEATH, "__nptl_death_event"}}) {
        INFO(std::string(name));
        void* self = ::dlsym(RTLD_DEFAULT, name);
        Dl_info dli{};
        REQUIRE(self != nullptr);
        REQUIRE(::dladdr(self, &dli) != 0);
        auto target_libc = module_base(fx.pid(), "libc.so.6");
        REQUIRE(target_libc.has_value());
        auto ours = s->target().agent()->event_addr(e);
        REQUIRE(ours.has_value());
        std::uint64_t offset = reinterpret_cast<std::uint64_t>(self) - reinterpret_cast<std::uint64_t>(dli.dli_fbase);
        CHECK(reinterpret_cast<std::uint64_t>(ours->u.bptaddr) == *target_libc + offset);
    }
    s->resume();
}

TEST_CASE("td_ta_thr_iter, td_thr_get_info and td_ta_map_lwp2thr agree with libthread_db")
{
    auto& lib = oracle_or_skip();
    steer_fixture fx;
    auto s = attach(fx);

    // Six threads; two released and joined (their stacks go to glibc's cache),
    // then two more that take those stacks, so handles repeat; one detached
    // thread that has ended; one released but not joined (its LWP is gone,
    // its record still on the list).
    std::vector<spawned_thread> threads;
    for (int i = 0; i < 6; ++i)
        threads.push_back(fx.spawn(s.get()));
    for (int i : {1, 3}) {
        fx.release(threads[i], s.get());
        fx.join(threads[i], s.get());
    }
    std::set<target_addr> freed{threads[1].handle, threads[3].handle};
    auto reuse_a = fx.spawn(s.get());
    auto reuse_b = fx.spawn(s.get());
    CHECK_MESSAGE((freed.contains(reuse_a.handle) || freed.contains(reuse_b.handle)),
                  "glibc did not reuse a joined thread's stack; the scenario lost its repeated handles");
    auto detached = fx.spawn(s.get(), true);
    fx.release(detached, s.get());
    fx.release(threads[5], s.get());   // not joined

    // Who is alive, by the fixture's own account, while it still runs.
    std::string tids_answer = fx.ask("tids", s.get());
    REQUIRE(tids_answer.starts_with("tids "));

    std::map<target_addr, pid_t> expected;   // handle -> LWP (pid when the LWP has ended)
    expected[main_thread(*s).value()] = fx.pid();
    for (int i : {0, 2, 4})
        expected[threads[i].handle] = threads[i].tid;
    expected[reuse_a.handle] = reuse_a.tid;
    expected[reuse_b.handle] = reuse_b.tid;
    expected[threads[5].handle] = fx.pid();

    s->interrupt();
    thread_db_agent oracle(lib, s->target());

    auto glibc_list = oracle.thr_iter();
    REQUIRE_MESSAGE(glibc_list.has_value(), "td_ta_thr_iter: ", td_name(glibc_list.error()));
    auto our_list = s->target().agent()->thr_iter();
    REQUIRE(our_list.has_value());

    std::set<std::pair<target_addr, pid_t>> glibc_set, our_set;
    for (target_addr h : *glibc_list) {
        auto info = oracle.get_info(h);
        REQUIRE_MESSAGE(info.has_value(), "td_thr_get_info(", hex(h), "): ", td_name(info.error()));
        glibc_set.insert({h, static_cast<pid_t>(info->ti_lid)});
    }
    for (const auto& th : *our_list) {
        auto info = th.get_info();
        REQUIRE_MESSAGE(info.has_value(), "get_info(", hex(th.value()), "): ", td_name(info.error()));
        our_set.insert({th.value(), static_cast<pid_t>(info->ti_lid)});
    }
    CHECK(glibc_list->size() == glibc_set.size());
    CHECK(our_list->size() == our_set.size());   // no thread listed twice
    CHECK(our_set == glibc_set);
    std::set<std::pair<target_addr, pid_t>> expected_set(expected.begin(), expected.end());
    CHECK(our_set == expected_set);

    // The fixture's running threads are exactly the listed ones with an LWP.
    std::set<pid_t> fixture_tids;
    {
        std::istringstream in(tids_answer.substr(5));
        for (pid_t t; in >> t;)
            fixture_tids.insert(t);
    }
    std::set<pid_t> listed_running;
    for (const auto& [h, lid] : our_set)
        if (h != threads[5].handle)
            listed_running.insert(lid);
    CHECK(listed_running == fixture_tids);

    // Every field, thread by thread.
    auto infos = compare_all_infos(*s, oracle);
    CHECK(infos.at(main_thread(*s).value()).ti_startfunc == nullptr);
    for (int i : {0, 2, 4}) {
        CHECK(infos.at(threads[i].handle).ti_startfunc != nullptr);
        CHECK(infos.at(threads[i].handle).ti_startfunc == infos.at(threads[0].handle).ti_startfunc);
        CHECK(infos.at(threads[i].handle).ti_state == TD_THR_ACTIVE);
    }

    // LWP -> handle for every task the kernel lists.
    auto tasks = test::task_tids(fx.pid());
    REQUIRE(tasks.size() == fixture_tids.size());
    for (pid_t lwp : tasks) {
        INFO("LWP ", lwp);
        auto ours = s->target().agent()->map_lwp2thr(tid_t{lwp});
        auto glibc = oracle.map_lwp2thr(lwp);
        REQUIRE_MESSAGE(ours.has_value(), td_name(ours.error()));
        REQUIRE_MESSAGE(glibc.has_value(), td_name(glibc.error()));
        CHECK(ours->value() == *glibc);
        // The released thread's record also says the process id; skip it.
        auto it = std::find_if(expected.begin(), expected.end(),
                               [&](const auto& kv) { return kv.second == lwp && kv.first != threads[5].handle; });
        REQUIRE(it != expected.end());
        CHECK(ours->value() == it->first);
    }
    s->resume();
}

TEST_CASE("event enable flags and masks: each side reads what the other wrote")
{
    auto& lib = oracle_or_skip();
    using events::operator==;
    steer_fixture fx;
    auto s = attach(fx);
    std::vector<spawned_thread> t;
    for (int i = 0; i < 5; ++i)
        t.push_back(fx.spawn(s.get()));
    s->interrupt();
    thread_db_agent oracle(lib, s->target());
    auto main = main_thread(*s);

    // Nothing changed yet: both see every thread disabled with an empty mask.
    for (const auto& [h, info] : compare_all_infos(*s, oracle)) {
        CHECK(info.ti_traceme == 0);
        CHECK(events::td_eventisempty(info.ti_events));
    }

    // Written through tdctl (journaled session calls), read by both.
    REQUIRE(s->changes().thr_event_enable(main, true));
    REQUIRE(s->changes().thr_event_enable(handle_in(*s, t[0].handle), true));
    REQUIRE(s->changes().thr_set_event(handle_in(*s, t[1].handle), mask_of({TD_CREATE, TD_SLEEP})));
    REQUIRE(s->changes().thr_set_event(handle_in(*s, t[2].handle), mask_of({TD_DEATH, TD_TIMEOUT})));
    REQUIRE(s->changes().thr_clear_event(handle_in(*s, t[2].handle), mask_of({TD_TIMEOUT})));
    td_thr_events_t all;
    events::td_event_fillset(all);   // both words, every bit
    REQUIRE(s->changes().thr_set_event(handle_in(*s, t[3].handle), all));
    {
        auto infos = compare_all_infos(*s, oracle);
        CHECK(infos.at(main.value()).ti_traceme == 1);
        CHECK(infos.at(t[0].handle).ti_traceme == 1);
        CHECK(infos.at(t[1].handle).ti_traceme == 0);
        CHECK(same_mask(infos.at(t[1].handle).ti_events, mask_of({TD_CREATE, TD_SLEEP})));
        CHECK(same_mask(infos.at(t[2].handle).ti_events, mask_of({TD_DEATH})));
        CHECK(same_mask(infos.at(t[3].handle).ti_events, all));
        CHECK(events::td_eventisempty(infos.at(t[4].handle).ti_events));
    }

    // Written through libthread_db, read by both.
    REQUIRE(oracle.event_enable(t[0].handle, false));
    REQUIRE(oracle.event_enable(t[4].handle, true));
    REQUIRE(oracle.thr_set_event(t[4].handle, mask_of({TD_READY, TD_REAP})));
    REQUIRE(oracle.thr_clear_event(t[1].handle, mask_of({TD_SLEEP})));
    REQUIRE(oracle.thr_clear_event(t[3].handle, mask_of({TD_CREATE})));
    {
        auto infos = compare_all_infos(*s, oracle);
        CHECK(infos.at(t[0].handle).ti_traceme == 0);
        CHECK(infos.at(t[4].handle).ti_traceme == 1);
        CHECK(same_mask(infos.at(t[4].handle).ti_events, mask_of({TD_READY, TD_REAP})));
        CHECK(same_mask(infos.at(t[1].handle).ti_events, mask_of({TD_CREATE})));
        td_thr_events_t all_but_create = all;
        events::td_event_delset(all_but_create, TD_CREATE);
        CHECK(same_mask(infos.at(t[3].handle).ti_events, all_but_create));
    }

    // And back through tdctl on what libthread_db wrote.
    REQUIRE(s->changes().thr_clear_event(handle_in(*s, t[4].handle), mask_of({TD_READY})));
    REQUIRE(s->changes().thr_event_enable(handle_in(*s, t[4].handle), false));
    {
        auto p = both_infos(*s, oracle, t[4].handle);
        check_same_info(p.ours, p.glibc, t[4].handle);
        CHECK(p.glibc.ti_traceme == 0);
        CHECK(same_mask(p.glibc.ti_events, mask_of({TD_REAP})));
    }

    // The global mask has no reader in libthread_db: what it writes, ours reads.
    auto before = s->target().agent()->global_mask();
    REQUIRE(before.has_value());
    CHECK(events::td_eventisempty(*before));
    REQUIRE(oracle.ta_set_event(mask_of({TD_CREATE, TD_DEATH, TD_CONCURRENCY})));
    auto after = s->target().agent()->global_mask();
    REQUIRE(after.has_value());
    CHECK_MESSAGE(same_mask(*after, mask_of({TD_CREATE, TD_DEATH, TD_CONCURRENCY})), describe_mask(*after));
    REQUIRE(oracle.ta_clear_event(mask_of({TD_CONCURRENCY})));
    after = s->target().agent()->global_mask();
    REQUIRE(after.has_value());
    CHECK(same_mask(*after, mask_of({TD_CREATE, TD_DEATH})));
    // ... and what ours writes, glibc's clear removes exactly.
    REQUIRE(s->changes().ta_set_event(mask_of({TD_LOCK_TRY})));
    REQUIRE(oracle.ta_clear_event(mask_of({TD_CREATE, TD_DEATH})));
    after = s->target().agent()->global_mask();
    REQUIRE(after.has_value());
    CHECK(same_mask(*after, mask_of({TD_LOCK_TRY})));
    s->resume();
}

namespace {

// One message as seen on either side, with handles turned into steer's
// thread indexes so two runs (two processes, different addresses) compare.
struct normalized_message {
    td_event_e event;
    int thread;      ///< steer index of the handle
    int data;        ///< steer index of msg.data (a handle for TD_CREATE/TD_DEATH)
    bool operator==(const normalized_message&) const = default;
};

std::string describe(const std::vector<normalized_message>& v)
{
    std::string out;
    for (const auto& m : v)
        out += fmt::format("{}({}, data {}) ", events::event_name(m.event), m.thread, m.data);
    return out.empty() ? "(none)" : out;
}

enum class drainer { ours, glibc };

// One run of the getmsg scenario on a fresh steer, draining the buffered
// messages with one side. Between drains the target is held.
std::vector<normalized_message> run_getmsg_scenario(thread_db_library& lib, drainer who)
{
    INFO(std::string(who == drainer::ours ? "drained by tdctl" : "drained by libthread_db"));
    steer_fixture fx;
    auto s = attach(fx);
    std::map<target_addr, int> index_of;
    auto idx = [&](std::uint64_t v) {
        auto it = index_of.find(target_addr{v});
        return it == index_of.end() ? -1 : it->second;
    };

    // Reporting on without breakpoints: global create|death, the main thread
    // enabled and with a mask of its own (which new threads inherit, so the
    // wipe of glibc's consume shows).
    const td_thr_events_t inherited = mask_of({TD_CREATE, TD_DEATH, TD_REAP});
    s->interrupt();
    auto main = main_thread(*s);
    index_of[main.value()] = 99;
    REQUIRE(s->changes().ta_set_event(mask_of({TD_CREATE, TD_DEATH})));
    REQUIRE(s->changes().thr_set_event(main, inherited));
    REQUIRE(s->changes().thr_event_enable(main, true));
    s->resume();

    std::vector<spawned_thread> t;
    for (int i = 0; i < 4; ++i) {
        t.push_back(fx.spawn(s.get()));
        index_of[t.back().handle] = i;
    }
    CHECK(fx.take_events().empty());   // no breakpoints, so the session shows nothing

    std::vector<normalized_message> seq;
    thread_db_agent oracle(lib, s->target());
    auto drain_all = [&] {
        s->interrupt();
        for (int guard = 0; guard < 64; ++guard) {
            auto m = who == drainer::ours ? s->target().agent()->event_getmsg() : oracle.ta_event_getmsg();
            if (!m) {
                CHECK_MESSAGE(m.error() == TD_NOMSG, "getmsg failed: ", td_name(m.error()));
                break;
            }
            seq.push_back({m->event, idx(m->handle.value), idx(m->data)});
            // What the consume left of the thread's mask, read by both sides.
            auto p = both_infos(*s, oracle, m->handle);
            check_same_info(p.ours, p.glibc, m->handle);
            if (who == drainer::glibc)
                CHECK_MESSAGE(events::td_eventisempty(p.ours.ti_events),
                              "glibc's consume was expected to wipe the mask: ", describe_mask(p.ours.ti_events));
            else
                CHECK_MESSAGE(same_mask(p.ours.ti_events, inherited),
                              "our consume must keep the mask: ", describe_mask(p.ours.ti_events));
            auto buf = s->target().agent()->protocol().read_buffer(m->handle);
            REQUIRE(buf.has_value());
            CHECK(buf->is_empty());
        }
        // Both sides agree the queue is empty now.
        CHECK(s->target().agent()->event_getmsg().error() == TD_NOMSG);
        CHECK(oracle.ta_event_getmsg().error() == TD_NOMSG);
        s->resume();
    };
    drain_all();

    // Two threads report their deaths (enabled first; the drain left them off
    // the list, so glibc records the message), then one more creation.
    s->interrupt();
    REQUIRE(s->changes().thr_event_enable(handle_in(*s, t[1].handle), true));
    REQUIRE(s->changes().thr_event_enable(handle_in(*s, t[3].handle), true));
    s->resume();
    fx.release(t[1], s.get());
    fx.release(t[3], s.get());
    t.push_back(fx.spawn(s.get()));
    index_of[t.back().handle] = 4;
    CHECK(fx.take_events().empty());
    drain_all();
    return seq;
}

}  // namespace

TEST_CASE("getmsg on identical runs: libthread_db and tdctl drain the same messages")
{
    auto& lib = oracle_or_skip();
    auto by_glibc = run_getmsg_scenario(lib, drainer::glibc);
    auto by_ours = run_getmsg_scenario(lib, drainer::ours);
    // LIFO: the newest message first.
    std::vector<normalized_message> expected{
        {TD_CREATE, 3, 3}, {TD_CREATE, 2, 2}, {TD_CREATE, 1, 1}, {TD_CREATE, 0, 0},
        {TD_CREATE, 4, 4}, {TD_DEATH, 3, 3},  {TD_DEATH, 1, 1},
    };
    CHECK_MESSAGE(by_glibc == expected, "libthread_db drained ", describe(by_glibc));
    CHECK_MESSAGE(by_ours == by_glibc, "tdctl drained ", describe(by_ours), "; libthread_db ", describe(by_glibc));
}

TEST_CASE("td_thr_event_getmsg: ours unlinks a thread anywhere in the list, and libthread_db then drains the rest")
{
    auto& lib = oracle_or_skip();
    steer_fixture fx;
    auto s = attach(fx);
    s->interrupt();
    auto main = main_thread(*s);
    REQUIRE(s->changes().ta_set_event(mask_of({TD_CREATE})));
    REQUIRE(s->changes().thr_event_enable(main, true));
    s->resume();

    auto batch = [&] {
        std::vector<spawned_thread> b;
        for (int i = 0; i < 3; ++i)
            b.push_back(fx.spawn(s.get()));
        return b;   // message list: b[2] -> b[1] -> b[0]
    };
    auto list_is = [&](std::vector<target_addr> want) {
        auto list = s->target().agent()->protocol().message_list();
        REQUIRE(list.has_value());
        CHECK(*list == want);
    };

    for (int pick : {1, 0, 2}) {   // middle, tail, head
        INFO("taking the thread at list position ", 2 - pick, " of 3");
        auto b = batch();
        s->interrupt();
        thread_db_agent oracle(lib, s->target());
        list_is({b[2].handle, b[1].handle, b[0].handle});

        auto m = handle_in(*s, b[pick].handle).event_getmsg();
        REQUIRE_MESSAGE(m.has_value(), td_name(m.error()));
        CHECK(m->event == TD_CREATE);
        CHECK(m->handle == b[pick].handle);
        CHECK(m->data == b[pick].handle.value);
        CHECK(handle_in(*s, b[pick].handle).event_getmsg().error() == TD_NOMSG);

        std::vector<target_addr> rest;
        for (int i : {2, 1, 0})
            if (i != pick)
                rest.push_back(b[i].handle);
        list_is(rest);
        // The oracle walks what is left and finds it well formed.
        for (target_addr want : rest) {
            auto g = oracle.ta_event_getmsg();
            REQUIRE_MESSAGE(g.has_value(), "td_ta_event_getmsg: ", td_name(g.error()));
            CHECK(g->event == TD_CREATE);
            CHECK(g->handle == want);
            CHECK(g->data == want.value);
        }
        CHECK(oracle.ta_event_getmsg().error() == TD_NOMSG);
        s->resume();
    }

    // For the record, the oracle's own td_thr_event_getmsg on a thread below
    // the head (SPEC §2.1): it consumes the message, then fails with TD_DBERR
    // and leaves the thread on the list with an empty buffer. Ours then skips
    // that entry instead of failing.
    auto b = batch();
    s->interrupt();
    {
        thread_db_agent oracle(lib, s->target());
        auto g = oracle.thr_event_getmsg(b[1].handle);
        CHECK_MESSAGE(!g.has_value(), "glibc's td_thr_event_getmsg now unlinks below the head; SPEC §2.1 is outdated");
        if (!g) {
            CHECK(g.error() == TD_DBERR);
            auto buf = s->target().agent()->protocol().read_buffer(b[1].handle);
            REQUIRE(buf.has_value());
            CHECK(buf->is_empty());
            list_is({b[2].handle, b[1].handle, b[0].handle});
        }
        auto first = s->target().agent()->event_getmsg();
        REQUIRE(first.has_value());
        CHECK(first->handle == b[2].handle);
        auto second = s->target().agent()->event_getmsg();
        REQUIRE(second.has_value());
        CHECK(second->handle == b[0].handle);
        CHECK(s->target().agent()->event_getmsg().error() == TD_NOMSG);
        list_is({});
    }
    s->resume();
}

TEST_CASE("at a launched program's entry point, before its thread library ran, both sides agree")
{
    auto& lib = oracle_or_skip();
    // Dynamic: ld.so has set up the main thread's record before the entry
    // point. Static: nothing yet, so both sides fake one handle-less thread.
    for (const char* fixture : {"churn", "churn_static"}) {
        INFO(std::string(fixture));
        ptrace::launch_options opts;
        opts.argv = {test::fixture_path(fixture), "1", "1"};
        auto s = core::session::launch(opts);
        REQUIRE_MESSAGE(s->target().agent() != nullptr, "no thread agent: ", s->target().no_agent_reason());
        REQUIRE(s->is_held());
        thread_db_agent oracle(lib, s->target());

        auto our_list = s->target().agent()->thr_iter();
        REQUIRE(our_list.has_value());
        REQUIRE(our_list->size() == 1);
        target_addr h = (*our_list)[0].value();
        auto glibc_list = oracle.thr_iter();
        if (std::string_view(fixture) == "churn_static") {
            // glibc 2.36 fakes the handle-less thread for the uninitialised
            // _dl_stack_user list, then walks the equally uninitialised
            // _dl_stack_used one and stops at its null link with TD_DBERR;
            // the two answer alike only where glibc answers at all.
            CHECK(h.is_null());
            if (!glibc_list)
                CHECK(glibc_list.error() == TD_DBERR);
        } else {
            REQUIRE_MESSAGE(glibc_list.has_value(), "td_ta_thr_iter: ", td_name(glibc_list.error()));
            REQUIRE(glibc_list->size() == 1);
            CHECK(h == (*glibc_list)[0]);
            CHECK_FALSE(h.is_null());
        }
        auto p = both_infos(*s, oracle, h);
        check_same_info(p.ours, p.glibc, h);
        CHECK(p.ours.ti_lid == s->target().pid());

        auto ours_map = s->target().agent()->map_lwp2thr(tid_t{s->target().pid()});
        auto glibc_map = oracle.map_lwp2thr(s->target().pid());
        REQUIRE_MESSAGE(ours_map.has_value(), td_name(ours_map.error()));
        REQUIRE_MESSAGE(glibc_map.has_value(), td_name(glibc_map.error()));
        CHECK(ours_map->value() == *glibc_map);

        // The enable flag of that thread (for a handle-less thread: the flag
        // new threads start with), written by one side, read by the other.
        REQUIRE(s->changes().thr_event_enable((*our_list)[0], true));
        p = both_infos(*s, oracle, h);
        check_same_info(p.ours, p.glibc, h);
        CHECK(p.glibc.ti_traceme == 1);
        REQUIRE(oracle.event_enable(h, false));
        p = both_infos(*s, oracle, h);
        check_same_info(p.ours, p.glibc, h);
        CHECK(p.ours.ti_traceme == 0);
        // Let it run to its end (session::kill() is slow here: see
        // regression_tests.cpp) and reap it, bounded.
        s->detach();
        CHECK(s->target().process().wait_launched_exit(10000).has_value());
    }
}
