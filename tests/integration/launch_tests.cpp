// Launching targets under tdctl with no commands: every thread creation and
// death is reported exactly once (SPEC §9 "Nothing lost"), compared with the
// fixture's own record; static and non-glibc targets (SPEC §2) still run to
// completion, and attached with live threads they are listed from /proc
// while event commands answer TD_NOLIBTHREAD. Also: signals sent while
// threads are created all arrive; a program that cannot be launched is
// reported as a failed launch.
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

using tid_handle = std::pair<pid_t, std::uint64_t>;

std::multiset<tid_handle> pairs_of_events(const std::vector<json>& events)
{
    std::multiset<tid_handle> out;
    for (const auto& e : events)
        out.emplace(static_cast<pid_t>(int_field(e, "tid")), hex_field(e, "handle"));
    return out;
}

std::multiset<tid_handle> pairs_of_record(const std::vector<record_fact>& facts)
{
    std::multiset<tid_handle> out;
    for (const auto& f : facts_of_kind(facts, "thread"))
        out.emplace(f.id(), f.handle());
    return out;
}

std::string pair_difference(const std::multiset<tid_handle>& expected, const std::multiset<tid_handle>& actual)
{
    std::vector<tid_handle> missing, extra;
    std::set_difference(expected.begin(), expected.end(), actual.begin(), actual.end(), std::back_inserter(missing));
    std::set_difference(actual.begin(), actual.end(), expected.begin(), expected.end(), std::back_inserter(extra));
    if (missing.empty() && extra.empty())
        return {};
    std::string s = fmt::format("{} (tid, handle) pairs missing, {} unexpected:", missing.size(), extra.size());
    for (std::size_t i = 0; i < missing.size() && i < 10; ++i)
        s += fmt::format(" -({}, {:#x})", missing[i].first, missing[i].second);
    for (std::size_t i = 0; i < extra.size() && i < 10; ++i)
        s += fmt::format(" +({}, {:#x})", extra[i].first, extra[i].second);
    return s;
}

/// Per TID, the events must alternate create, death, create, ...: a TID is
/// reused only after its thread is gone, and tdctl reports a death before the
/// dying thread can release its TID. Empty when they do.
std::string lifecycle_violations(const std::vector<json>& records, pid_t main_tid)
{
    std::map<pid_t, int> alive;
    std::string problems;
    for (const auto& ev : records_of_type(records, "event")) {
        auto tid = static_cast<pid_t>(int_field(ev, "tid"));
        if (tid == main_tid) {
            problems += "event about the main thread: " + ev.dump() + "\n";
            continue;
        }
        int& n = alive[tid];
        if (ev["event"] == "TD_CREATE")
            ++n;
        else if (ev["event"] == "TD_DEATH")
            --n;
        if (n < 0 || n > 1)
            problems += fmt::format("TID {} now {} times alive after: {}\n", tid, n, ev.dump());
        if (problems.size() > 2000)
            break;
    }
    for (const auto& [tid, n] : alive)
        if (n != 0 && problems.size() < 2000)
            problems += fmt::format("TID {} created without a death (or the reverse): balance {}\n", tid, n);
    return problems;
}

struct churn_expectation {
    std::string fixture;
    int outer;
    int inner;
};

/// Launches a churn variant with --record and checks every event against the
/// record: exact counts, (tid, handle) multisets, data == handle, order per
/// TID, the launched/exit/watch_end records and the exit status.
void check_churn_launch(const churn_expectation& c)
{
    temp_file record(c.fixture + "-record");
    auto run = run_tdctl({"--json", "--", fixture_path(c.fixture), "--record", record.path(),
                          std::to_string(c.outer), std::to_string(c.inner)},
                         90s);
    INFO(run.describe());
    auto facts = read_record(record.path());
    INFO("record: " << format_record(facts));
    const std::size_t expected = static_cast<std::size_t>(c.outer) * (1 + static_cast<std::size_t>(c.inner));

    CHECK(run.result.status.is_exited());
    CHECK(run.result.status.exit_code() == 0);
    // The fixture itself did what it says.
    REQUIRE(count_kind(facts, "thread") == expected);
    REQUIRE(count_kind(facts, "done") == 1);
    REQUIRE(count_kind(facts, "start") == 1);
    const pid_t pid = facts.front().id();

    auto launched = run.of_type("launched");
    REQUIRE(launched.size() == 1);
    CHECK(int_field(launched[0], "pid") == pid);
    CHECK(launched[0]["backend"] == "nptl");
    CHECK(run.records.front()["type"] == "launched");

    auto creates = run.events("TD_CREATE");
    auto deaths = run.events("TD_DEATH");
    CHECK(creates.size() == expected);
    CHECK(deaths.size() == expected);
    CHECK(run.of_type("event").size() == creates.size() + deaths.size());

    auto record_tids = to_multiset(thread_tids(facts));
    auto diff_create = multiset_difference(record_tids, tid_multiset(creates));
    CHECK_MESSAGE(diff_create.empty(), "TD_CREATE tids vs record: " << diff_create);
    auto diff_death = multiset_difference(record_tids, tid_multiset(deaths));
    CHECK_MESSAGE(diff_death.empty(), "TD_DEATH tids vs record: " << diff_death);

    // The handle of each message is the thread's own pthread_self().
    auto record_pairs = pairs_of_record(facts);
    auto diff_create_pairs = pair_difference(record_pairs, pairs_of_events(creates));
    CHECK_MESSAGE(diff_create_pairs.empty(), "TD_CREATE: " << diff_create_pairs);
    auto diff_death_pairs = pair_difference(record_pairs, pairs_of_events(deaths));
    CHECK_MESSAGE(diff_death_pairs.empty(), "TD_DEATH: " << diff_death_pairs);

    auto creates_bad = malformed_thread_events(creates);
    CHECK_MESSAGE(creates_bad.empty(), creates_bad);
    auto deaths_bad = malformed_thread_events(deaths);
    CHECK_MESSAGE(deaths_bad.empty(), deaths_bad);

    // Every thread was joined, so each passed glibc's own death report:
    // none needs to be made up from its LWP exit.
    std::size_t synthesized = 0;
    for (const auto& d : deaths)
        if (d.contains("origin"))
            ++synthesized;
    CHECK_MESSAGE(synthesized == 0, synthesized << " TD_DEATH messages not reported by glibc for joined threads");

    auto order = lifecycle_violations(run.records, pid);
    CHECK_MESSAGE(order.empty(), order);

    auto exits = run.of_type("exit");
    REQUIRE(exits.size() == 1);
    CHECK(int_field(exits[0], "pid") == pid);
    CHECK(int_field(exits[0], "status") == 0);
    auto ends = run.of_type("watch_end");
    REQUIRE(ends.size() == 1);
    CHECK(int_field(ends[0], "messages") == static_cast<std::int64_t>(creates.size() + deaths.size()));
    CHECK(ends[0]["reason"] == "exit");
}

/// A target with no backend, launched with no commands: it still runs to
/// completion and tdctl exits with its status.
void check_runs_without_backend(const std::string& fixture)
{
    temp_file record(fixture + "-record");
    auto run = run_tdctl({"--json", "--", fixture_path(fixture), "--record", record.path(), "2", "5"}, 60s);
    INFO(run.describe());
    auto facts = read_record(record.path());
    INFO("record: " << format_record(facts));
    CHECK(run.result.status.is_exited());
    CHECK(run.result.status.exit_code() == 0);
    CHECK(count_kind(facts, "thread") == 12);
    CHECK(count_kind(facts, "done") == 1);
    auto launched = run.of_type("launched");
    REQUIRE(launched.size() == 1);
    CHECK(launched[0]["backend"] == "none");
    CHECK(launched[0].contains("reason"));
    CHECK(run.of_type("event").empty());
    auto exits = run.of_type("exit");
    REQUIRE(exits.size() == 1);
    CHECK(int_field(exits[0], "status") == 0);
    CHECK(int_field(exits[0], "pid") == facts.front().id());
}

/// Launch + `-e threads` + `-e watch` on a target without a backend: the
/// threads come from /proc with backend "none", watch is refused with
/// TD_NOLIBTHREAD, tdctl exits 2 and the target still completes.
void check_commands_without_backend(const std::string& fixture)
{
    temp_file record(fixture + "-record");
    auto run = run_tdctl({"--json", "-e", "threads", "-e", "watch", "--", fixture_path(fixture), "--record",
                          record.path(), "2", "5"},
                         60s);
    INFO(run.describe());
    auto facts = read_record(record.path());
    INFO("record: " << format_record(facts));
    CHECK(run.result.status.exit_code() == 2);
    REQUIRE(count_kind(facts, "start") == 1);
    const pid_t pid = facts.front().id();
    // Held at the entry point: only the main thread exists yet.
    auto process = run.of_type("process");
    REQUIRE(process.size() == 1);
    CHECK(process[0]["backend"] == "none");
    CHECK(int_field(process[0], "pid") == pid);
    auto threads = run.of_type("thread");
    REQUIRE(threads.size() == 1);
    CHECK(int_field(threads[0], "tid") == pid);
    CHECK(threads[0]["state"] == "lwp");
    CHECK(threads[0]["handle"].is_null());

    auto errors = run.of_type("error");
    REQUIRE(errors.size() == 1);
    CHECK(errors[0]["error"] == "TD_NOLIBTHREAD");
    std::string message = errors[0].value("message", "");
    CHECK(message.find("-e 2") != std::string::npos);
    CHECK(message.size() > 30);
    CHECK(run.result.err.find("TD_NOLIBTHREAD") != std::string::npos);
    CHECK(run.events("TD_CREATE").empty());

    // The target was let go and ran to the end anyway.
    CHECK(count_kind(facts, "thread") == 12);
    CHECK(count_kind(facts, "done") == 1);
    auto exits = run.of_type("exit");
    REQUIRE(exits.size() == 1);
    CHECK(int_field(exits[0], "status") == 0);
}

/// The fixture must have been built: musl-gcc comes with musl-tools, which
/// scripts/setup-debian.sh installs, so a missing musl build is a failure.
void require_built(const std::string& fixture)
{
    REQUIRE_MESSAGE(has_fixture(fixture), fixture << " was not built (no musl-gcc at configure time?): install "
                                                     "musl-tools (scripts/setup-debian.sh) and configure again");
}

/// Attach to a running multi-threaded steer build without a backend (static
/// and stripped, or musl), with threads that stay alive, and run `threads`
/// followed by one event command. Checked per command: the thread list is
/// exactly /proc/PID/task (LWPs, no handles), the event command gives one
/// TD_NOLIBTHREAD error record whose message names the command and the
/// reason (the one the attached record gives, naming `why`), the batch ends
/// with exit 2 after a clean detach, and the target is left untraced, answers
/// and starts threads.
void check_attached_without_backend(const std::string& fixture, std::string_view why)
{
    temp_file record(fixture + "-record");
    auto steer = child_process::spawn({fixture_path(fixture), "--record", record.path()});
    const pid_t pid = steer.pid();
    std::set<pid_t> expected{pid};
    std::multiset<pid_t> spawned;  // not "expected minus its first": TIDs wrap, the leader's may be the largest
    for (int i = 0; i < 4; ++i) {
        pid_t tid = steer_spawn(steer).tid;
        expected.insert(tid);
        spawned.insert(tid);
    }
    REQUIRE(live_tids(pid) == expected);
    REQUIRE(to_multiset(thread_tids(read_record(record.path()))) == spawned);

    auto check_threads_listed = [&](const tdctl_run& run) {
        auto attached = run.of_type("attached");
        REQUIRE(attached.size() == 1);
        CHECK(attached[0]["backend"] == "none");
        CHECK(int_field(attached[0], "pid") == pid);
        auto process = run.of_type("process");
        REQUIRE(process.size() == 1);
        CHECK(process[0]["backend"] == "none");
        std::multiset<pid_t> listed;
        for (const auto& t : run.of_type("thread")) {
            listed.insert(static_cast<pid_t>(int_field(t, "tid")));
            CHECK(t["state"] == "lwp");
            CHECK(t["handle"].is_null());
        }
        auto now = live_tids(pid);
        CHECK(listed == std::multiset<pid_t>(now.begin(), now.end()));
        CHECK(now == expected);
        CHECK(int_field(process[0], "threads") == static_cast<std::int64_t>(now.size()));
        return attached[0].value("reason", "");
    };
    auto check_target_fine = [&] {
        CHECK(tracer_pid(pid) == 0);
        CHECK(steer.ask("ping") == "pong");
        auto fresh = steer_spawn(steer);
        CHECK_FALSE(expected.contains(fresh.tid));
        CHECK(live_tids(pid).contains(fresh.tid));
        expected.insert(fresh.tid);
    };

    const std::vector<std::string> event_commands{"event addr create", "event set create", "event enable on all",
                                                  "event getmsg", "stop create"};
    for (const auto& command : event_commands) {
        CAPTURE(command);
        auto run = run_tdctl({"--json", "-p", std::to_string(pid), "-e", "threads", "-e", command}, 30s);
        INFO(run.describe());
        const std::string reason = check_threads_listed(run);
        CHECK_MESSAGE(reason.find(why) != std::string::npos, "the attached record's reason does not say " << why);
        auto errors = run.of_type("error");
        REQUIRE(errors.size() == 1);
        CHECK(errors[0]["error"] == "TD_NOLIBTHREAD");
        const std::string message = errors[0].value("message", "");
        CHECK(message.find("-e 2") != std::string::npos);
        CHECK(message.find("TD_NOLIBTHREAD") != std::string::npos);
        CHECK_FALSE(reason.empty());
        CHECK_MESSAGE(message.find(reason) != std::string::npos, "the message does not give the reason '" << reason
                                                                                                           << "'");
        CHECK(run.result.err.find(message) != std::string::npos);
        // README "Exit status": 2 when a batch command fails, after a clean detach.
        CHECK(run.result.status.exit_code() == 2);
        CHECK(run.of_type("detached").size() == 1);
        CHECK(run.of_type("event_addr").empty());
        CHECK(run.of_type("stopped").empty());
        check_target_fine();
    }

    // All of them in one batch: as gdb -batch with -ex, every command runs and
    // fails on its own line; the batch exits 2 at its end.
    std::vector<std::string> args{"--json", "-p", std::to_string(pid), "-e", "threads"};
    for (const auto& command : event_commands) {
        args.push_back("-e");
        args.push_back(command);
    }
    auto run = run_tdctl(args, 30s);
    INFO(run.describe());
    check_threads_listed(run);
    auto errors = run.of_type("error");
    REQUIRE(errors.size() == event_commands.size());
    for (std::size_t i = 0; i < errors.size(); ++i) {
        CHECK(errors[i]["error"] == "TD_NOLIBTHREAD");
        CHECK(errors[i].value("message", "").find(fmt::format("-e {}", i + 2)) != std::string::npos);
    }
    CHECK(run.result.status.exit_code() == 2);
    CHECK(run.of_type("detached").size() == 1);
    check_target_fine();
    CHECK(steer.ask("quit") == "bye");
    CHECK(steer.require_exit(10s).is_success());
}

}  // namespace

TEST_SUITE("launch")
{
    TEST_CASE("churn 8 500: exactly one TD_CREATE and one TD_DEATH per recorded thread")
    {
        require_ptrace();
        check_churn_launch({"churn", 8, 500});
    }

    TEST_CASE("churn 3 40 several times: exact counts every time")
    {
        require_ptrace();
        for (int i = 0; i < 3; ++i) {
            CAPTURE(i);
            check_churn_launch({"churn", 3, 40});
        }
    }

    TEST_CASE("churn_static 2 5: the static glibc's symbols in .symtab give exact counts")
    {
        require_ptrace();
        check_churn_launch({"churn_static", 2, 5});
    }

    TEST_CASE("churn_static_stripped: no backend, the target still runs to completion")
    {
        require_ptrace();
        check_runs_without_backend("churn_static_stripped");
        check_commands_without_backend("churn_static_stripped");
    }

    TEST_CASE("churn_musl: no backend, the target still runs to completion")
    {
        require_ptrace();
        require_built("churn_musl");
        check_runs_without_backend("churn_musl");
        check_commands_without_backend("churn_musl");
    }

    TEST_CASE("steer_static_stripped attached with 5 live threads: threads from /proc, TD_NOLIBTHREAD for events")
    {
        require_attach();
        check_attached_without_backend("steer_static_stripped", "stripped");
    }

    TEST_CASE("steer_musl attached with 5 live threads: threads from /proc, TD_NOLIBTHREAD for events")
    {
        require_attach();
        require_built("steer_musl");
        check_attached_without_backend("steer_musl", "musl");
    }

    TEST_CASE("the target's exit status passes through: exit 7, SIGSEGV, a program that cannot run")
    {
        require_ptrace();
        auto seven = run_tdctl({"--json", "--", "/bin/sh", "-c", "exit 7"}, 30s);
        {
            INFO(seven.describe());
            CHECK(seven.result.status.exit_code() == 7);
            auto exits = seven.of_type("exit");
            REQUIRE(exits.size() == 1);
            CHECK(int_field(exits[0], "status") == 7);
        }
        auto segv = run_tdctl({"--json", "--", "/bin/sh", "-c", "kill -SEGV $$"}, 30s);
        {
            INFO(segv.describe());
            CHECK(segv.result.status.exit_code() == 128 + 11);
            auto exits = segv.of_type("exit");
            REQUIRE(exits.size() == 1);
            CHECK(exits[0].value("signal", "") == "SIGSEGV");
            CHECK_FALSE(exits[0].contains("status"));
        }
        temp_file missing("no-such-program");
        auto none = run_tdctl({"--", missing.path()}, 30s);
        INFO(none.describe());
        CHECK(none.result.status.exit_code() == 2);
        CHECK(std::count(none.result.err.begin(), none.result.err.end(), '\n') == 1);
        CHECK(none.result.err.find(missing.path()) != std::string::npos);
    }

    // A program that cannot be launched was reported as {"error":"attach"}.
    TEST_CASE("a failed launch is labelled launch, not attach")
    {
        require_ptrace();
        auto run = run_tdctl({"--json", "--", "/nonexistent/tdctl-no-such-program"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        auto errors = run.of_type("error");
        REQUIRE(errors.size() == 1);
        CHECK(errors[0].value("error", "") == "launch");
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
}
