// The thread list `threads` shows (core::list_threads, and the tdctl binary's
// text and JSON) on a target with every kind of thread glibc keeps a record
// of: blocked threads, joinable threads that ended and were not joined (glibc
// keeps their records and its libthread_db reports them under the process
// ID), a blocked detached thread; and threads it no longer lists (a detached
// one that ended, a joined one). Every record the system libthread_db.so.1
// lists must appear exactly once, keyed by its handle; the main thread's row
// is the main thread; ended records are zombies without an LWP; every LWP of
// /proc/PID/task appears once. Checked against the oracle, /proc and the
// fixture's own record.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/session/session.hpp"
#include "core/thread_handle.hpp"
#include "core/protocol/thread_list.hpp"
#include "tests/conformance/steer_driver.hpp"
#include "tests/conformance/thread_db_host.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::conformance;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

thread_db_library& oracle_or_skip()
{
    test::require_ptrace();
    return thread_db_library::get_or_skip();
}

// The threads of the scenario, by role.
struct scenario {
    std::vector<spawned_thread> blocked;     // joinable, waiting to be released
    spawned_thread blocked_detached;         // detached, waiting
    std::vector<spawned_thread> unjoined;    // joinable, ended, not joined
    spawned_thread joined;                   // ended and joined: no record
    spawned_thread detached_ended;           // detached and ended: no record
};

// Builds the scenario while `s` services the fixture's stops. The freed
// records go first, so a later thread may take their stacks (and handles).
scenario build(steer_fixture& fx, core::session* s)
{
    scenario sc;
    sc.joined = fx.spawn(s);
    fx.release(sc.joined, s);
    fx.join(sc.joined, s);
    sc.detached_ended = fx.spawn(s, true);
    fx.release(sc.detached_ended, s);
    for (int i = 0; i < 3; ++i)
        sc.blocked.push_back(fx.spawn(s));
    sc.blocked_detached = fx.spawn(s, true);
    for (int i = 0; i < 3; ++i) {
        sc.unjoined.push_back(fx.spawn(s));
        fx.release(sc.unjoined.back(), s);
    }
    return sc;
}

// The live threads of the scenario: handle -> LWP.
std::map<target_addr, pid_t> running_threads(const scenario& sc)
{
    std::map<target_addr, pid_t> out;
    for (const auto& t : sc.blocked)
        out[t.handle] = t.tid;
    out[sc.blocked_detached.handle] = sc.blocked_detached.tid;
    return out;
}

// The fixture's own account agrees with the spawn answers: each thread
// recorded itself with that TID and handle, and the released ones recorded
// their exit.
void check_fixture_record(const steer_fixture& fx, const scenario& sc)
{
    auto facts = test::read_record(fx.record_path());
    std::set<std::pair<pid_t, std::uint64_t>> recorded;
    for (const auto& f : test::facts_of_kind(facts, "thread"))
        recorded.insert({f.id(), f.handle()});
    std::set<pid_t> exited;
    for (const auto& f : test::facts_of_kind(facts, "exit"))
        exited.insert(f.id());
    std::vector<spawned_thread> all = sc.blocked;
    all.insert(all.end(), sc.unjoined.begin(), sc.unjoined.end());
    all.push_back(sc.blocked_detached);
    all.push_back(sc.joined);
    all.push_back(sc.detached_ended);
    for (const auto& t : all) {
        INFO("thread ", t.index, " tid ", t.tid);
        CHECK(recorded.contains({t.tid, t.handle.value}));
    }
    for (const auto& t : sc.unjoined)
        CHECK(exited.contains(t.tid));
    CHECK(exited.contains(sc.joined.tid));
    CHECK(exited.contains(sc.detached_ended.tid));
    for (const auto& t : sc.blocked)
        CHECK_FALSE(exited.contains(t.tid));
}

// glibc's list: handle -> td_thr_get_info, each handle once.
std::map<target_addr, td_thrinfo_t> glibc_records(thread_db_agent& oracle)
{
    auto list = oracle.thr_iter();
    REQUIRE_MESSAGE(list.has_value(), "td_ta_thr_iter: ", td_name(list.error()));
    std::map<target_addr, td_thrinfo_t> out;
    for (target_addr h : *list) {
        auto info = oracle.get_info(h);
        REQUIRE_MESSAGE(info.has_value(), "td_thr_get_info(", fmt::format("{}", h), "): ", td_name(info.error()));
        CHECK_MESSAGE(!out.contains(h), "libthread_db listed ", fmt::format("{}", h), " twice");
        out[h] = *info;
    }
    return out;
}

// One row as both layers give it: LWP (0 for none), handle (null for none), state word.
struct row {
    pid_t tid = 0;
    target_addr handle;
    std::string state;
};

std::string describe(const std::vector<row>& rows)
{
    std::string out;
    for (const auto& r : rows)
        out += fmt::format("  tid {} handle {} {}\n", r.tid, r.handle, r.state);
    return out;
}

std::vector<row> rows_of(const std::vector<core::thread_entry>& entries)
{
    std::vector<row> out;
    for (const auto& e : entries) {
        std::string state = e.kind == core::thread_entry_kind::running  ? "running"
                            : e.kind == core::thread_entry_kind::ended  ? "zombie"
                            : e.kind == core::thread_entry_kind::starting ? "starting"
                                                                          : "lwp";
        out.push_back({e.lwp.value, e.handle, state});
    }
    return out;
}

// `threads` rows of the binary's JSON: tid null for no LWP.
std::vector<row> rows_of(const std::vector<json>& records)
{
    std::vector<row> out;
    for (const auto& r : records) {
        if (r.value("type", "") != "thread")
            continue;
        row x;
        x.tid = r["tid"].is_null() ? 0 : r["tid"].get<pid_t>();
        if (!r["handle"].is_null())
            x.handle = target_addr{std::stoull(r["handle"].get<std::string>(), nullptr, 16)};
        x.state = r["state"].get<std::string>();
        out.push_back(x);
    }
    return out;
}

// What every form of the list must show: the main thread first, with its own
// record; each record glibc lists exactly once; the running threads with
// their LWPs; the records no LWP runs without one, in their state (`idle`:
// handle -> "zombie" or "starting"); every LWP of /proc once; no other row.
// `running_state` is the state word a running thread has in this form.
void check_rows(const std::vector<row>& rows, pid_t pid, target_addr main_handle,
                const std::map<target_addr, td_thrinfo_t>& glibc, const std::map<target_addr, pid_t>& running,
                const std::map<target_addr, std::string>& idle, const std::string& running_state)
{
    INFO("rows:\n", describe(rows));
    REQUIRE_FALSE(rows.empty());
    CHECK(rows.front().tid == pid);
    CHECK(rows.front().handle == main_handle);
    CHECK(rows.front().state == running_state);

    std::map<target_addr, int> seen_handles;
    std::map<pid_t, int> seen_tids;
    for (const auto& r : rows) {
        CHECK_MESSAGE(r.tid >= 0, "a row with TID ", r.tid);
        if (!r.handle.is_null())
            ++seen_handles[r.handle];
        if (r.tid != 0)
            ++seen_tids[r.tid];
    }
    for (const auto& [h, n] : seen_handles)
        CHECK_MESSAGE(n == 1, "handle ", fmt::format("{}", h), " listed ", n, " times");
    for (const auto& [t, n] : seen_tids)
        CHECK_MESSAGE(n == 1, "TID ", t, " listed ", n, " times");

    std::set<target_addr> ours, theirs;
    for (const auto& [h, n] : seen_handles)
        ours.insert(h);
    for (const auto& [h, info] : glibc)
        theirs.insert(h);
    CHECK(ours == theirs);

    auto tasks = test::task_tids(pid);
    std::set<pid_t> lwps(tasks.begin(), tasks.end());
    std::set<pid_t> listed;
    for (const auto& [t, n] : seen_tids)
        listed.insert(t);
    CHECK(listed == lwps);

    for (const auto& r : rows) {
        INFO("row tid ", r.tid, " handle ", fmt::format("{}", r.handle));
        if (r.handle == main_handle)
            continue;
        if (auto it = running.find(r.handle); it != running.end()) {
            CHECK(r.tid == it->second);
            CHECK(r.state == running_state);
        } else if (auto want = idle.find(r.handle); want != idle.end()) {
            CHECK(r.tid == 0);
            CHECK(r.state == want->second);
        } else {
            FAIL("a row the scenario does not have");
        }
    }
}

struct binary_run {
    test::command_result result;
    std::vector<json> records;
};

binary_run run_threads(pid_t pid, bool json_output)
{
    std::vector<std::string> argv{test::tdctl_path(), "-p", std::to_string(pid), "-e", "threads"};
    if (json_output)
        argv.insert(argv.begin() + 1, "--json");
    binary_run run{test::run_command(argv, 30000ms), {}};
    INFO(run.result.describe());
    REQUIRE(run.result.status.is_success());
    if (json_output)
        run.records = test::json_lines(run.result.out);
    return run;
}

// The text form: one line per row; a row without an LWP has "-" for its TID.
void check_text(const std::string& out, pid_t pid, target_addr main_handle,
                const std::map<target_addr, std::string>& idle)
{
    INFO(out);
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
        lines.push_back(l);
    auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.find("HANDLE") != std::string::npos; });
    REQUIRE(header != lines.end());
    REQUIRE(std::next(header) != lines.end());
    std::istringstream first(*std::next(header));
    std::string tid, name, handle, state;
    first >> tid >> name >> handle >> state;
    CHECK(tid == std::to_string(pid));
    CHECK(handle == fmt::format("{}", main_handle));
    CHECK(state == "active");
    for (const auto& [h, want] : idle) {
        auto n = std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
            return l.find(fmt::format(" {} ", h)) != std::string::npos;
        });
        CHECK_MESSAGE(n == 1, fmt::format("{}", h), " on ", n, " lines");
        auto it = std::find_if(lines.begin(), lines.end(), [&](const std::string& l) {
            return l.find(fmt::format(" {} ", h)) != std::string::npos;
        });
        if (it != lines.end()) {
            std::istringstream z(*it);
            std::string ztid, zhandle, zstate;
            z >> ztid >> zhandle >> zstate;   // no name: no LWP, no comm
            CHECK(ztid == "-");
            CHECK(zstate == want);
        }
    }
}

}  // namespace

TEST_CASE("threads: every record libthread_db lists appears once, keyed by handle; unjoined ones are zombies")
{
    auto& lib = oracle_or_skip();
    steer_fixture fx;
    auto s = core::session::attach(fx.pid());
    REQUIRE_MESSAGE(s->target().agent() != nullptr, "no thread agent: ", s->target().no_agent_reason());
    auto sc = build(fx, s.get());
    check_fixture_record(fx, sc);
    auto running = running_threads(sc);
    std::set<target_addr> ended;
    std::map<target_addr, std::string> idle;
    for (const auto& t : sc.unjoined) {
        ended.insert(t.handle);
        idle[t.handle] = "zombie";
    }

    s->interrupt();
    thread_db_agent oracle(lib, s->target());
    auto glibc = glibc_records(oracle);
    const target_addr main_handle = main_thread(*s).value();
    // The scenario as glibc sees it: the main thread, the running threads,
    // and the unjoined records, which it reports under the process ID.
    {
        std::set<target_addr> expected{main_handle};
        for (const auto& [h, t] : running)
            expected.insert(h);
        expected.insert(ended.begin(), ended.end());
        std::set<target_addr> theirs;
        for (const auto& [h, info] : glibc)
            theirs.insert(h);
        REQUIRE(theirs == expected);
        for (target_addr h : ended) {
            CHECK(glibc.at(h).ti_lid == fx.pid());
            CHECK(glibc.at(h).ti_state == TD_THR_ZOMBIE);
        }
        CHECK(glibc.at(main_handle).ti_lid == fx.pid());
    }

    // The library's list.
    auto entries = core::list_threads(s->target(), s->target().agent());
    REQUIRE(entries.has_value());
    check_rows(rows_of(*entries), fx.pid(), main_handle, glibc, running, idle, "running");
    for (const auto& e : *entries) {
        if (!e.has_record)
            continue;
        REQUIRE(e.info.has_value());
        // td_thr_get_info as glibc gives it, field by field.
        const auto& g = glibc.at(e.handle);
        CHECK(e.info->ti_lid == g.ti_lid);
        CHECK(e.info->ti_state == g.ti_state);
        CHECK(e.info->ti_startfunc == g.ti_startfunc);
        CHECK(e.info->ti_tid == g.ti_tid);
    }
    s->resume();
    s.reset();   // detach: the binary attaches next

    // The binary, JSON and text.
    auto json_run = run_threads(fx.pid(), true);
    {
        INFO(json_run.result.out);
        check_rows(rows_of(json_run.records), fx.pid(), main_handle, glibc, running, idle, "active");
        for (const auto& r : json_run.records) {
            if (r.value("type", "") != "thread" || !r["tid"].is_null())
                continue;
            CHECK(r["state"] == "zombie");
            CHECK(r["name"] == "");
            CHECK(r["startsym"] == "steered_main");
        }
        auto process = std::find_if(json_run.records.begin(), json_run.records.end(),
                                    [](const json& r) { return r.value("type", "") == "process"; });
        REQUIRE(process != json_run.records.end());
        CHECK((*process)["threads"] == glibc.size());
        CHECK_FALSE(process->contains("ns_pid"));
    }
    auto text_run = run_threads(fx.pid(), false);
    check_text(text_run.result.out, fx.pid(), main_handle, idle);
    CHECK(fx.ask("ping", nullptr) == "pong");
}

// The states glibc leaves a record no LWP runs in besides an ended thread's
// cleared tid, written into the unjoined records while nobody can join them:
// -1, which pthread_join stores just before it frees the record (the
// `tid -1` row seen while the target was held); a TID kept after the exit
// (glibc after 2.42), here one the kernel has given to a running thread
// since; and tid 0 with cancelhandling 0, a record set up for a thread not
// cloned yet (a cached stack being reused). `event enable on all` lists
// none of them under the process ID.
TEST_CASE("threads: records whose tid reads -1, another thread's TID or 0 (not started) are listed once, without an LWP")
{
    auto& lib = oracle_or_skip();
    steer_fixture fx;
    auto s = core::session::attach(fx.pid());
    REQUIRE_MESSAGE(s->target().agent() != nullptr, "no thread agent: ", s->target().no_agent_reason());
    auto sc = build(fx, s.get());
    auto running = running_threads(sc);
    const target_addr joining = sc.unjoined[0].handle, kept = sc.unjoined[1].handle, starting = sc.unjoined[2].handle;
    std::map<target_addr, std::string> idle{{joining, "zombie"}, {kept, "zombie"}, {starting, "starting"}};

    s->interrupt();
    const auto& layout = s->target().agent()->layout();
    REQUIRE(layout.tid.element_bytes() == 4);
    REQUIRE(layout.cancelhandling.element_bytes() == 4);
    auto put32 = [&](target_addr at, std::int32_t v) {
        std::vector<std::uint8_t> bytes(4);
        std::memcpy(bytes.data(), &v, 4);
        poke(fx.pid(), at, bytes);
    };
    put32(joining + layout.tid.offset, -1);
    put32(kept + layout.tid.offset, sc.blocked[0].tid);
    put32(starting + layout.tid.offset, 0);
    put32(starting + layout.cancelhandling.offset, 0);

    thread_db_agent oracle(lib, s->target());
    auto glibc = glibc_records(oracle);
    // glibc reads the fields written: it reports the raw values.
    CHECK(glibc.at(joining).ti_lid == -1);
    CHECK(glibc.at(kept).ti_lid == sc.blocked[0].tid);
    CHECK(glibc.at(starting).ti_lid == fx.pid());
    CHECK(glibc.at(starting).ti_state == TD_THR_ACTIVE);
    const target_addr main_handle = main_thread(*s).value();

    auto entries = core::list_threads(s->target(), s->target().agent());
    REQUIRE(entries.has_value());
    check_rows(rows_of(*entries), fx.pid(), main_handle, glibc, running, idle, "running");
    // map_lwp2thr of the running thread whose TID the ended record also holds.
    auto mapped = s->target().agent()->map_lwp2thr(tid_t{sc.blocked[0].tid});
    REQUIRE(mapped.has_value());
    CHECK(mapped->value() == sc.blocked[0].handle);
    for (const auto& [h, state] : idle) {
        auto info = handle_in(*s, h).get_info();
        REQUIRE(info.has_value());
        CHECK(info->ti_lid == fx.pid());   // like a cleared tid: no LWP runs it
    }
    s->resume();
    s.reset();

    auto json_run = run_threads(fx.pid(), true);
    {
        INFO(json_run.result.out);
        check_rows(rows_of(json_run.records), fx.pid(), main_handle, glibc, running, idle, "active");
    }
    auto text_run = run_threads(fx.pid(), false);
    check_text(text_run.result.out, fx.pid(), main_handle, idle);

    // One line per LWP, the records without one counted apart.
    auto enable = test::run_command({test::tdctl_path(), "--json", "-p", std::to_string(fx.pid()), "-e",
                                     "event enable on all"},
                                    30000ms);
    INFO(enable.describe());
    REQUIRE(enable.status.is_success());
    std::multiset<pid_t> listed;
    std::size_t ended_count = 0, starting_count = 0;
    for (const auto& r : test::json_lines(enable.out)) {
        if (r.value("type", "") != "enable")
            continue;
        if (r.contains("ended_threads"))
            ended_count += r["ended_threads"].get<std::size_t>();
        else if (r.contains("starting_threads"))
            starting_count += r["starting_threads"].get<std::size_t>();
        else
            listed.insert(r["tid"].get<pid_t>());
    }
    auto tasks = test::task_tids(fx.pid());
    CHECK(listed == std::multiset<pid_t>(tasks.begin(), tasks.end()));
    CHECK(ended_count == 2);
    CHECK(starting_count == 1);
}
