// Targets that do awkward things (SPEC §4, §9 "The target never dies because
// of the controller"): fork and vfork, exec from a non-main thread, signals
// during thread creation, a thread name that breaks naive parsers, and a
// libc that was replaced or deleted on disk after it was mapped.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <set>

#include <fmt/format.h>

#include "tests/integration/changed_libc.hpp"
#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

std::vector<pid_t> tids_with_labels(const std::vector<record_fact>& facts, std::initializer_list<const char*> labels)
{
    std::vector<pid_t> out;
    for (const auto* label : labels) {
        auto some = thread_tids(facts, label);
        out.insert(out.end(), some.begin(), some.end());
    }
    return out;
}

// The forker's children all exited 0 (`expected` of them), the run's
// TD_CREATE and TD_DEATH are exactly those of the parent's churn threads,
// well formed, and no event names a child or a thread of one; tdctl's exit
// record is the parent's, with status 0.
void check_children_and_parent_events(const tdctl_run& run, const std::vector<record_fact>& facts,
                                      std::size_t expected)
{
    std::set<pid_t> child_ids;
    for (const auto& f : facts_of_kind(facts, "fork"))
        child_ids.insert(f.id());
    for (pid_t tid : thread_tids(facts, "child"))
        child_ids.insert(tid);
    for (const auto& e : run.of_type("event")) {
        CAPTURE(e.dump());
        CHECK_FALSE(child_ids.contains(static_cast<pid_t>(int_field(e, "tid"))));
        CHECK_FALSE(child_ids.contains(static_cast<pid_t>(int_field(e, "reporter"))));
    }
    auto bad = malformed_thread_events(run.events("TD_CREATE")) + malformed_thread_events(run.events("TD_DEATH"));
    CHECK_MESSAGE(bad.empty(), bad);
    auto exits = run.of_type("exit");
    REQUIRE(exits.size() == 1);
    CHECK(int_field(exits[0], "pid") == facts.front().id());
    CHECK(int_field(exits[0], "status") == 0);

    auto child_exits = facts_of_kind(facts, "child-exit");
    CHECK(facts_of_kind(facts, "fork").size() == expected);
    REQUIRE(child_exits.size() == expected);
    for (const auto& c : child_exits) {
        CAPTURE(c.line);
        CHECK_MESSAGE(c.number(1) == 0, "a child died: a trap byte was left in its memory, or it was kept");
    }
    auto parent_threads = to_multiset(tids_with_labels(facts, {"churner", "churn"}));
    auto diff_create = multiset_difference(parent_threads, tid_multiset(run.events("TD_CREATE")));
    CHECK_MESSAGE(diff_create.empty(), "TD_CREATE vs the parent's threads: " << diff_create);
    auto diff_death = multiset_difference(parent_threads, tid_multiset(run.events("TD_DEATH")));
    CHECK_MESSAGE(diff_death.empty(), "TD_DEATH vs the parent's threads: " << diff_death);
}

// `tdctl --json -- forker --record R MODE`: the run and the fixture's record.
struct forker_run {
    tdctl_run run;
    std::vector<record_fact> facts;
};

forker_run run_forker(const char* mode)
{
    temp_file record(fmt::format("forker-{}-record", mode));
    auto run = run_tdctl({"--json", "--", fixture_path("forker"), "--record", record.path(), mode}, 60s);
    return {std::move(run), read_record(record.path())};
}

}  // namespace

TEST_SUITE("hard cases")
{
    TEST_CASE("forker (fork, vfork): exit 0, children unharmed and untraced, events only for the parent's threads")
    {
        require_ptrace();
        auto [run, facts] = run_forker("fork");
        INFO(run.describe());
        INFO("record: " << format_record(facts, 100));

        CHECK(run.result.status.exit_code() == 0);
        REQUIRE(count_kind(facts, "done") == 1);
        check_children_and_parent_events(run, facts, 4);
        CHECK(count_kind(facts, "thread") >= 1 + 9);
        CHECK(thread_tids(facts, "child").size() == 9);
    }

    TEST_CASE("forker clone-process: raw clone() children without CLONE_THREAD are let go clean, the parent's threads reported")
    {
        require_ptrace();
        auto [run, facts] = run_forker("clone-process");
        INFO(run.describe());
        INFO("record: " << format_record(facts, 100));

        CHECK(run.result.status.exit_code() == 0);
        REQUIRE(count_kind(facts, "done") == 1);
        check_children_and_parent_events(run, facts, 3);
    }

    TEST_CASE("forker exec-thread: a non-main thread execs; events after the exec come from the new image")
    {
        require_ptrace();
        auto [run, facts] = run_forker("exec-thread");
        INFO(run.describe());
        INFO("record: " << format_record(facts));

        CHECK(run.result.status.exit_code() == 0);
        REQUIRE(count_kind(facts, "done") == 1);
        auto starts = facts_of_kind(facts, "start");
        REQUIRE(starts.size() == 2);
        CHECK(starts[0].id() == starts[1].id());
        const pid_t pid = starts[0].id();
        auto exec_threads = thread_tids(facts, "exec");
        REQUIRE(exec_threads.size() == 1);
        auto stage2 = facts_of_kind(facts, "thread");
        stage2.erase(std::remove_if(stage2.begin(), stage2.end(), [](const auto& f) { return f.label() != "stage2"; }),
                     stage2.end());
        REQUIRE(stage2.size() == 3);

        // Split the output at the exec record.
        auto exec_at = std::find_if(run.records.begin(), run.records.end(),
                                    [](const json& r) { return r.value("type", "") == "exec"; });
        REQUIRE_MESSAGE(exec_at != run.records.end(), "no exec record");
        CHECK(int_field(*exec_at, "pid") == pid);
        CHECK(exec_at->value("backend", "") == "nptl");
        std::vector<json> before(run.records.begin(), exec_at), after(exec_at + 1, run.records.end());

        auto creates_before = event_records(before, "TD_CREATE");
        REQUIRE(creates_before.size() == 1);
        CHECK(int_field(creates_before[0], "tid") == exec_threads[0]);
        for (const auto& e : records_of_type(before, "event"))
            CHECK_MESSAGE(int_field(e, "tid") == exec_threads[0], e.dump());

        std::multiset<std::pair<pid_t, std::uint64_t>> expected;
        for (const auto& f : stage2)
            expected.emplace(f.id(), f.handle());
        for (const char* name : {"TD_CREATE", "TD_DEATH"}) {
            CAPTURE(name);
            std::multiset<std::pair<pid_t, std::uint64_t>> got;
            for (const auto& e : event_records(after, name))
                got.emplace(static_cast<pid_t>(int_field(e, "tid")), hex_field(e, "handle"));
            CHECK(got == expected);
        }
        auto bad = malformed_thread_events(records_of_type(run.records, "event"));
        CHECK_MESSAGE(bad.empty(), bad);
        auto exits = run.of_type("exit");
        REQUIRE(exits.size() == 1);
        CHECK(int_field(exits[0], "status") == 0);
    }

    TEST_CASE("signals 100 launched: every signal delivered, exact counts, exit 0")
    {
        require_ptrace();
        temp_file record("signals-record");
        auto run = run_tdctl({"--json", "--", fixture_path("signals"), "--record", record.path(), "100"}, 60s);
        INFO(run.describe());
        auto facts = read_record(record.path());
        INFO("record: " << format_record(facts));

        CHECK(run.result.status.exit_code() == 0);
        CHECK(count_kind(facts, "signal-sent") == 100);
        CHECK(count_kind(facts, "signal-got") == 100);
        CHECK(count_kind(facts, "done") == 1);
        auto threads = to_multiset(thread_tids(facts));
        auto diff_create = multiset_difference(threads, tid_multiset(run.events("TD_CREATE")));
        CHECK_MESSAGE(diff_create.empty(), "TD_CREATE: " << diff_create);
        auto diff_death = multiset_difference(threads, tid_multiset(run.events("TD_DEATH")));
        CHECK_MESSAGE(diff_death.empty(), "TD_DEATH: " << diff_death);
        auto exits = run.of_type("exit");
        REQUIRE(exits.size() == 1);
        CHECK(int_field(exits[0], "status") == 0);
    }

    TEST_CASE("named: the thread name 'a b) c' is listed exactly, in JSON and in text, and named in its events")
    {
        require_attach();
        temp_file record("named-record");
        auto target = start_fixture("named", {"--record", record.path()}, record.path());
        const pid_t pid = target.pid();
        auto facts = read_record(record.path());
        auto named = facts_of_kind(facts, "thread");
        REQUIRE(named.size() == 1);
        REQUIRE(named[0].label() == "a b) c");
        const pid_t tid = named[0].id();
        REQUIRE(task_comm(pid, tid) == "a b) c");

        auto run = run_tdctl({"--json", "-p", std::to_string(pid), "-e", "threads"}, 30s);
        {
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 0);
            auto threads = run.of_type("thread");
            CHECK(threads.size() == 2);
            auto it = std::find_if(threads.begin(), threads.end(),
                                   [&](const json& t) { return int_field(t, "tid") == tid; });
            REQUIRE(it != threads.end());
            CHECK((*it)["name"] == "a b) c");
            CHECK(hex_field(*it, "handle") == named[0].handle());
        }
        auto text = run_tdctl({"-p", std::to_string(pid), "-e", "threads"}, 30s);
        {
            INFO(text.describe());
            CHECK(text.result.status.exit_code() == 0);
            bool found = false;
            std::istringstream lines(text.result.out);
            for (std::string line; std::getline(lines, line);)
                if (line.find("a b) c") != std::string::npos && line.find(std::to_string(tid)) != std::string::npos &&
                    line.find(fmt::format("{:#x}", named[0].handle())) != std::string::npos)
                    found = true;
            CHECK_MESSAGE(found, "no line with the TID, the name 'a b) c' and the handle");
        }
        CHECK(tracer_pid(pid) == 0);

        // Events about threads that bear the name when they are reported:
        // the named thread starts a child (named so from its clone on), and
        // both end, while a watch is armed. Armed means: both reporting
        // addresses planted, the global mask changed and the named thread
        // reporting, read past tdctl.
        const auto regions = nptl_regions(pid, {named[0].handle()});
        const auto before = take_snapshot(pid, regions);
        auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                           "watch create,death --count 3 --for 30"});
        REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
        auto armed = [&] {
            auto now = take_snapshot(pid, regions);
            const auto flag = now.at(fmt::format("{:#x}.report_events", named[0].handle()));
            return now.at("text __nptl_create_event") != before.at("text __nptl_create_event") &&
                   now.at("text __nptl_death_event") != before.at("text __nptl_death_event") &&
                   now.at("__nptl_threads_events") != before.at("__nptl_threads_events") &&
                   std::any_of(flag.begin(), flag.end(), [](std::uint8_t b) { return b != 0; });
        };
        REQUIRE_MESSAGE(wait_until(armed, 10s), "the watch did not arm: "
                                                    << snapshot_difference(before, take_snapshot(pid, regions)));
        CHECK(target.ask("end", 20s) == "ended");
        auto status = tdctl.require_exit(40s);
        INFO("tdctl stdout:\n" << tdctl.stdout_text() << "stderr:\n" << tdctl.stderr_text());
        CHECK(status.exit_code() == 0);

        facts = read_record(record.path());
        INFO("record: " << format_record(facts));
        auto threads = facts_of_kind(facts, "thread");
        REQUIRE(threads.size() == 2);
        const pid_t child = threads[1].id();
        // The fixture's own account of the child's name (read back by the
        // child itself) and of both ends.
        REQUIRE(threads[1].label() == "a b) c");
        std::set<pid_t> exits;
        for (const auto& f : facts_of_kind(facts, "exit"))
            exits.insert(f.id());
        CHECK(exits == std::set<pid_t>{tid, child});

        auto records = parse_records(tdctl.stdout_text());
        auto creates = event_records(records, "TD_CREATE");
        auto deaths = event_records(records, "TD_DEATH");
        REQUIRE(creates.size() == 1);
        CHECK(int_field(creates[0], "tid") == child);
        CHECK(int_field(creates[0], "reporter") == tid);
        CHECK(hex_field(creates[0], "handle") == threads[1].handle());
        CHECK(creates[0].value("name", "") == threads[1].label());
        REQUIRE(deaths.size() == 2);
        std::map<pid_t, std::string> death_names;
        for (const auto& d : deaths)
            death_names[static_cast<pid_t>(int_field(d, "tid"))] = d.value("name", "");
        CHECK(death_names == std::map<pid_t, std::string>{{tid, named[0].label()}, {child, threads[1].label()}});
        auto bad = malformed_thread_events(creates) + malformed_thread_events(deaths);
        CHECK_MESSAGE(bad.empty(), bad);
        auto ends = records_of_type(records, "watch_end");
        REQUIRE(ends.size() == 1);
        CHECK(ends[0]["reason"] == "count");

        // Put back (the process-wide part; both threads are gone).
        CHECK(tracer_pid(pid) == 0);
        const auto global = nptl_regions(pid, {});
        memory_snapshot global_before;
        for (const auto& r : global)
            global_before[r.name] = before.at(r.name);
        auto diff = snapshot_difference(global_before, take_snapshot(pid, global));
        CHECK_MESSAGE(diff.empty(), "changed by tdctl:\n" << diff);
        CHECK(target.ask("ping") == "pong");
        CHECK(wait_until([&] { return live_tids(pid) == std::set<pid_t>{pid}; }, 5s));
    }

    // Acceptance 8: events still work, or a clear refusal. tdctl reads the
    // symbols of a deleted or replaced libc through /proc/PID/map_files/;
    // when this test may open that file, so may tdctl, and events must work.
    // Only when it may not is a refusal accepted, and it must say why
    // (tests/integration/libc_refusal_tests.cpp forces that case).
    TEST_CASE("libc replaced or deleted on disk after mapping: events work (or, without map_files, a clear refusal)")
    {
        require_attach();
        for (const auto how : {libc_change::replaced, libc_change::deleted}) {
            const std::string change = how == libc_change::deleted ? "deleted" : "replaced";
            CAPTURE(change);
            changed_libc_target target(how);
            const bool readable = target.map_files_readable();
            INFO(target.map_files_path() << (readable ? std::string(" is") : std::string(" is not"))
                                          << " readable by this test");
            check_session_on_changed_libc(target, {}, !readable);
        }
    }

    TEST_CASE("attach before a churn storm, watch until it exits: exact counts from the attach path")
    {
        require_attach();
        temp_file record("churn-attach-record");
        auto target = child_process::spawn({fixture_path("churn"), "--record", record.path(), "--wait-start", "8",
                                            "100"});
        const pid_t pid = target.pid();
        REQUIRE(target.require_line(10s) == fmt::format("ready {}", pid));
        auto tdctl = watch_then_go(target);
        auto status = tdctl.require_exit(60s);
        auto target_status = target.require_exit(20s);
        INFO("tdctl stderr: " << tdctl.stderr_text());
        auto records = parse_records(tdctl.stdout_text());
        auto facts = read_record(record.path());
        INFO("record: " << format_record(facts));

        CHECK(status.exit_code() == 0);
        CHECK(target_status.is_success());
        const std::size_t expected = 8 * (1 + 100);
        REQUIRE(count_kind(facts, "thread") == expected);
        auto creates = event_records(records, "TD_CREATE");
        auto deaths = event_records(records, "TD_DEATH");
        CHECK(creates.size() == expected);
        CHECK(deaths.size() == expected);
        auto recorded = to_multiset(thread_tids(facts));
        auto diff_create = multiset_difference(recorded, tid_multiset(creates));
        CHECK_MESSAGE(diff_create.empty(), "TD_CREATE: " << diff_create);
        auto diff_death = multiset_difference(recorded, tid_multiset(deaths));
        CHECK_MESSAGE(diff_death.empty(), "TD_DEATH: " << diff_death);
        auto bad = malformed_thread_events(creates) + malformed_thread_events(deaths);
        CHECK_MESSAGE(bad.empty(), bad);
        auto exits = records_of_type(records, "exit");
        REQUIRE(exits.size() == 1);
        CHECK(int_field(exits[0], "status") == 0);
        auto ends = records_of_type(records, "watch_end");
        REQUIRE(ends.size() == 1);
        CHECK(ends[0]["reason"] == "exit");
    }
}
