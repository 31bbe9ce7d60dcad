// Targets that fork, vfork, clone() processes or exec from a non-main thread
// (the forker fixture, launched; SPEC §4, §9): children unharmed and
// untraced, events only for the parent's threads, events after an exec from
// the new image.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

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

TEST_SUITE("forks and exec")
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

    TEST_CASE("event set, event enable on all and stop hold through a wrapper that execs the program")
    {
        // `tdctl -- python3 ...` where python3 is a pyenv shim (bash execing
        // bash, pyenv and at last python3): the mask, the enable flag and the
        // stop's breakpoints went with the first image, and `stop create`
        // waited while the program made its threads, until it exited.
        require_ptrace();
        temp_file record("wrapped-churn");
        auto run = run_tdctl({"--json", "-e", "event set create", "-e", "event enable on all", "-e",
                              "stop create --for 20", "-e", "bt", "-e", "continue", "--", "/bin/sh", "-c",
                              fmt::format("exec {} --record {} 1 1", fixture_path("churn"), record.path())},
                             60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        REQUIRE(run.of_type("exec").size() == 1);
        auto stopped = run.of_type("stopped");
        REQUIRE(stopped.size() == 1);
        CHECK(stopped[0].value("event", "") == "TD_CREATE");
        CHECK(stopped[0].value("name", "") == "churn");
        // The stop came in the program, before its first thread ran.
        auto facts = parse_record(read_text_file(record.path()).value_or(""));
        CHECK(count_kind(facts, "done") == 1);
        CHECK(thread_tids(facts, "outer").size() == 1);
    }
}
