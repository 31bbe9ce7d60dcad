// Detach puts the target back as it was (SPEC §4 "Detach", §9): the bytes
// at both reporting addresses, the global event mask, the message list head,
// ld.so's initial report flag and every thread's report_events / eventbuf /
// nextevent are read through /proc/PID/mem before and after each tdctl run
// (addresses from nm and /proc/PID/maps, not from tdctl). A target that was
// stopped stays stopped; a controller ended by a signal still cleans up.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>


#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

/// TID -> handle from `tdctl --json -p PID -e threads`, checked against
/// /proc/PID/task and against the handles the fixture recorded.
std::map<pid_t, std::uint64_t> thread_handles(pid_t pid, const std::vector<record_fact>& facts)
{
    auto run = run_tdctl({"--json", "-p", std::to_string(pid), "-e", "threads"}, 30s);
    INFO(run.describe());
    REQUIRE(run.result.status.exit_code() == 0);
    std::map<pid_t, std::uint64_t> handles;
    std::set<pid_t> listed;
    for (const auto& t : run.of_type("thread")) {
        auto tid = static_cast<pid_t>(int_field(t, "tid"));
        listed.insert(tid);
        handles[tid] = hex_field(t, "handle");
    }
    CHECK(listed == live_tids(pid));
    for (const auto& f : facts_of_kind(facts, "thread")) {
        CAPTURE(f.line);
        REQUIRE(handles.contains(f.id()));
        CHECK(handles[f.id()] == f.handle());
    }
    REQUIRE(handles.contains(pid));
    return handles;
}

std::vector<std::uint64_t> values_of(const std::map<pid_t, std::uint64_t>& m)
{
    std::vector<std::uint64_t> v;
    for (const auto& [tid, h] : m)
        v.push_back(h);
    return v;
}

/// The target is alive, untraced, and no task is in a stop (tracing stop
/// 't' or group stop 'T'): sleeper threads sit in pause().
void check_left_running(pid_t pid, const std::set<pid_t>& tids)
{
    CHECK(tracer_pid(pid) == 0);
    auto states = task_states(pid);
    std::set<pid_t> now;
    for (const auto& [tid, state] : states) {
        now.insert(tid);
        CAPTURE(tid);
        CHECK(state != 't');
        CHECK(state != 'T');
        CHECK(state != 'Z');
    }
    CHECK(now == tids);
}

/// Bytes of the reporting addresses as the libc file on disk has them.
void check_text_matches_file(pid_t pid, const memory_snapshot& snap, const std::vector<memory_region>& regions)
{
    auto libc = find_module(pid, "libc.so.6");
    for (const auto& r : regions) {
        if (!r.name.starts_with("text "))
            continue;
        auto offset = file_offset_of(pid, r.address);
        REQUIRE(offset.has_value());
        CHECK_MESSAGE(snap.at(r.name) == read_file_bytes(libc.mapped_path, *offset, r.length),
                      r.name << " in memory differs from " << libc.mapped_path);
    }
}

const memory_region& region_named(const std::vector<memory_region>& regions, const std::string& name)
{
    for (const auto& r : regions)
        if (r.name == name)
            return r;
    throw std::runtime_error("no region " + name);
}

struct sleeper_target {
    temp_file record{"sleeper-record"};
    child_process process;
    std::vector<record_fact> facts;
    std::map<pid_t, std::uint64_t> handles;
    std::vector<memory_region> regions;
    memory_snapshot before;

    explicit sleeper_target(int threads)
        : process(start_fixture("sleeper", {"--record", record.path(), std::to_string(threads)}, record.path()))
    {
        facts = read_record(record.path());
        handles = thread_handles(pid(), facts);
        regions = nptl_regions(pid(), values_of(handles));
        before = take_snapshot(pid(), regions);
    }
    pid_t pid() const { return process.pid(); }
    std::set<pid_t> tids() const
    {
        std::set<pid_t> s;
        for (const auto& [tid, h] : handles)
            s.insert(tid);
        return s;
    }
    std::string changes_since_attach() { return snapshot_difference(before, take_snapshot(pid(), regions)); }
};

}  // namespace

TEST_SUITE("detach")
{
    TEST_CASE("attach, watch --for 1, detach: every nptl byte as before, the target still runs")
    {
        require_attach();
        sleeper_target t(3);
        INFO("record: " << format_record(t.facts));

        // Nothing has armed events in this process yet (a `threads` run did
        // not leave anything behind either): the text is the file's, the
        // masks and flags are zero.
        check_text_matches_file(t.pid(), t.before, t.regions);
        for (const auto& [name, bytes] : t.before) {
            if (name.starts_with("text "))
                continue;
            CAPTURE(name);
            CHECK(bytes == std::vector<std::uint8_t>(bytes.size(), 0));
        }

        // tdctl names the same reporting addresses as nm + maps.
        auto addr = run_tdctl({"--json", "-p", std::to_string(t.pid()), "-e", "event addr create,death"}, 30s);
        {
            INFO(addr.describe());
            CHECK(addr.result.status.exit_code() == 0);
            auto list = addr.of_type("event_addr");
            REQUIRE(list.size() == 2);
            CHECK(list[0]["event"] == "TD_CREATE");
            CHECK(hex_field(list[0], "address") == region_named(t.regions, "text __nptl_create_event").address);
            CHECK(list[1]["event"] == "TD_DEATH");
            CHECK(hex_field(list[1], "address") == region_named(t.regions, "text __nptl_death_event").address);
        }

        auto run = run_tdctl({"--json", "-p", std::to_string(t.pid()), "-e", "watch --for 1"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        auto ends = run.of_type("watch_end");
        REQUIRE(ends.size() == 1);
        CHECK(ends[0]["reason"] == "duration");
        CHECK(int_field(ends[0], "messages") == 0);
        CHECK(run.of_type("detached").size() == 1);

        auto diff = t.changes_since_attach();
        CHECK_MESSAGE(diff.empty(), "changed by tdctl:\n" << diff);
        check_left_running(t.pid(), t.tids());
    }

    TEST_CASE("event set / event enable on all / stop --for: undone at detach")
    {
        require_attach();
        sleeper_target t(3);
        INFO("record: " << format_record(t.facts));
        const pid_t some_thread = thread_tids(t.facts).front();

        auto run = run_tdctl({"--json", "-p", std::to_string(t.pid()), "-e", "event set create", "-e",
                              fmt::format("event set death {}", some_thread), "-e", "event enable on all", "-e",
                              "stop create --for 0.3"},
                             30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        auto masks = run.of_type("mask");
        REQUIRE(masks.size() == 2);
        CHECK(masks[0]["scope"] == "global");
        CHECK(masks[1]["scope"] == "thread");
        CHECK(int_field(masks[1], "tid") == some_thread);
        auto enables = run.of_type("enable");
        CHECK(enables.size() == t.handles.size());
        std::set<pid_t> enabled;
        for (const auto& e : enables) {
            enabled.insert(static_cast<pid_t>(int_field(e, "tid")));
            CHECK(e["traceme"] == true);
        }
        CHECK(enabled == t.tids());
        CHECK(run.of_type("detached").size() == 1);

        auto diff = t.changes_since_attach();
        CHECK_MESSAGE(diff.empty(), "changed by tdctl:\n" << diff);
        check_left_running(t.pid(), t.tids());
    }

    TEST_CASE("SIGTERM, SIGINT, SIGHUP to tdctl in the middle of a watch: exit 128+N, bytes restored")
    {
        require_attach();
        sleeper_target t(3);
        INFO("record: " << format_record(t.facts));
        const auto& create_text = region_named(t.regions, "text __nptl_create_event");

        for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
            CAPTURE(sig);
            auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(t.pid()), "-e", "watch"});
            auto first = json::parse(tdctl.require_line(20s), nullptr, false);
            REQUIRE(first.value("type", "") == "attached");
            // Armed: the watch planted its breakpoint (and set flags and
            // masks). This also shows the comparison below can fail.
            bool armed = wait_until(
                [&] { return take_snapshot(t.pid(), t.regions).at(create_text.name) != t.before.at(create_text.name); },
                10s);
            CHECK_MESSAGE(armed, "the watch did not change the TD_CREATE reporting address within 10 s");
            // ... and enabled reporting in every thread that already existed.
            auto all_enabled = [&] {
                auto now = take_snapshot(t.pid(), t.regions);
                return std::all_of(t.handles.begin(), t.handles.end(), [&](const auto& th) {
                    auto flag = now.at(fmt::format("{:#x}.report_events", th.second));
                    return std::any_of(flag.begin(), flag.end(), [](std::uint8_t b) { return b != 0; });
                });
            };
            CHECK_MESSAGE(wait_until(all_enabled, 10s), "during the watch: "
                                                            << snapshot_difference(t.before, take_snapshot(t.pid(), t.regions)));
            REQUIRE(tdctl.send_signal(sig));
            auto status = tdctl.require_exit(20s);
            INFO("tdctl stdout:\n" << tdctl.stdout_text() << "stderr:\n" << tdctl.stderr_text());
            CHECK(status.is_exited());
            CHECK(status.exit_code() == 128 + sig);
            auto records = parse_records(tdctl.stdout_text());
            auto ends = records_of_type(records, "watch_end");
            REQUIRE(ends.size() == 1);
            CHECK(ends[0]["reason"] == "signal");
            CHECK(records_of_type(records, "detached").size() == 1);

            auto diff = t.changes_since_attach();
            CHECK_MESSAGE(diff.empty(), "changed by tdctl:\n" << diff);
            check_left_running(t.pid(), t.tids());
        }
    }

    TEST_CASE("a target stopped with SIGSTOP stays stopped through threads and watch, and runs after SIGCONT")
    {
        require_attach();
        temp_file record("steer-record");
        auto steer = child_process::spawn({fixture_path("steer"), "--record", record.path()});
        const pid_t pid = steer.pid();
        REQUIRE(steer.ask("spawn", 10s).starts_with("thread 0 "));
        REQUIRE(steer.ask("spawn", 10s).starts_with("thread 1 "));
        const auto tids = live_tids(pid);
        REQUIRE(tids.size() == 3);

        REQUIRE(steer.send_signal(SIGSTOP));
        auto all_stopped = [&] {
            auto states = task_states(pid);
            return states.size() == tids.size() &&
                   std::all_of(states.begin(), states.end(), [](const auto& s) { return s.second == 'T'; });
        };
        REQUIRE(wait_until(all_stopped, 5s));

        auto run = run_tdctl({"--json", "-p", std::to_string(pid), "-e", "threads"}, 30s);
        {
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 0);
            std::set<pid_t> listed;
            for (const auto& t : run.of_type("thread"))
                listed.insert(static_cast<pid_t>(int_field(t, "tid")));
            CHECK(listed == tids);
        }
        std::this_thread::sleep_for(200ms);
        CHECK_MESSAGE(all_stopped(), "not every task is in 'T' after tdctl left");
        CHECK(tracer_pid(pid) == 0);

        // While a watch holds it, the stopped target does not run either: a
        // ping gets no answer.
        auto watch = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "watch --for 1"});
        REQUIRE(json::parse(watch.require_line(20s), nullptr, false).value("type", "") == "attached");
        REQUIRE(steer.write_stdin("ping\n"));
        auto early = steer.read_line(500ms);
        CHECK_MESSAGE(!early.has_value(), "the stopped target answered during the watch: " << early.value_or(""));
        auto watch_status = watch.require_exit(20s);
        INFO("watch stdout:\n" << watch.stdout_text() << "stderr:\n" << watch.stderr_text());
        CHECK(watch_status.exit_code() == 0);
        std::this_thread::sleep_for(200ms);
        CHECK_MESSAGE(all_stopped(), "not every task is in 'T' after the watch");
        CHECK(tracer_pid(pid) == 0);

        REQUIRE(steer.send_signal(SIGCONT));
        if (!early)
            CHECK(steer.require_line(5s) == "pong");
        CHECK(steer.ask("ping") == "pong");
        auto spawned = steer.ask("spawn", 10s);
        CHECK(spawned.starts_with("thread 2 "));
        CHECK(live_tids(pid).size() == 4);
        CHECK(steer.ask("quit") == "bye");
        CHECK(steer.require_exit(10s).is_success());
    }
}
