// `watch`, `stop`, `sleep` and the event commands (`event set`, `event
// enable`, `event getmsg`, `event addr`): exact counts from the attach path,
// a thread born while `stop` waits, a creation consumed by `event getmsg`
// never reported again, TD_NOEVENT as an answer, ended threads counted by
// `event enable`, a bad `--count`, and tdctl asleep (no busy loop) while the
// target runs. A case that names a bug failed before its fix.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

double seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; }

/// CPU time (user + system, s) of the reaped children of this process so far.
double children_cpu()
{
    rusage ru{};
    ::getrusage(RUSAGE_CHILDREN, &ru);
    return seconds(ru.ru_utime) + seconds(ru.ru_stime);
}

/// A python3 program that starts and joins a thread every 20 ms for `for_s`
/// seconds: a steady trickle of clone and exit stops.
child_process start_thread_trickle(double for_s)
{
    auto python = find_program("python3");
    REQUIRE_MESSAGE(python.has_value(), "python3 not on PATH (scripts/setup-debian.sh installs it)");
    const std::string code = fmt::format(R"(import threading, time, sys
print("ready", flush=True)
end = time.time() + {}
while time.time() < end:
    t = threading.Thread(target=time.sleep, args=(0.001,))
    t.start(); t.join(); time.sleep(0.02)
)",
                                         for_s);
    auto target = child_process::spawn({*python, "-c", code});
    REQUIRE(target.require_line(20s) == "ready");
    return target;
}

}  // namespace

TEST_SUITE("watch and events")
{
    // `event addr all` on glibc failed the batch (exit 2) with one
    // TD_NOEVENT error per event glibc does not report.
    TEST_CASE("event addr all: one answer per event, TD_NOEVENT as an answer, exit 0")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"--json", "-p", t.pid_text(), "-e", "event addr all"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        CHECK(run.of_type("error").empty());
        auto answers = run.of_type("event_addr");
        std::set<std::string> names;
        int with_address = 0;
        for (const auto& a : answers) {
            names.insert(a.value("event", ""));
            if (a["address"].is_string()) {
                ++with_address;
                CHECK(hex_field(a, "address") != 0);
            } else {
                CHECK(a.value("result", "") == "TD_NOEVENT");
            }
        }
        CHECK(names.size() == answers.size());   // each event once
        CHECK(names.contains("TD_CREATE"));
        CHECK(names.contains("TD_DEATH"));
        CHECK(with_address == 2);                 // glibc reports create and death
        CHECK(answers.size() > 2);
        CHECK(tracer_pid(t.pid()) == 0);
    }

    // TD_NOEVENT is the answer for an event the library does not report, not
    // a failure (it failed the batch with exit 2); nothing reported: exit 1.
    TEST_CASE("event addr sleep: TD_NOEVENT on glibc, as an answer record, exit 1")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"--json", "-p", t.pid_text(), "-e", "event addr sleep"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 1);
        CHECK(run.of_type("error").empty());
        auto answers = run.of_type("event_addr");
        REQUIRE(answers.size() == 1);
        CHECK(answers[0]["event"] == "TD_SLEEP");
        CHECK(answers[0]["result"] == "TD_NOEVENT");
        CHECK(answers[0]["address"].is_null());
        CHECK(run.of_type("detached").size() == 1);
        CHECK(tracer_pid(t.pid()) == 0);
    }

    // `event enable on all` printed one line per ended-but-unjoined thread,
    // each with the process ID as its TID (about 1800 on a thread storm).
    TEST_CASE("event enable on all: ended threads are counted, not listed under the process ID")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("churn"), "8", "3000"});
        std::this_thread::sleep_for(50ms);
        auto run = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", "event enable on all"}, 60s);
        INFO(run.describe().substr(0, 3000));
        REQUIRE(run.result.status.is_success());
        int as_pid = 0, summaries = 0;
        for (const auto& r : run.of_type("enable")) {
            if (r.contains("ended_threads")) {
                ++summaries;
                CHECK(int_field(r, "ended_threads") > 0);
            } else if (r.contains("starting_threads")) {
                // Records set up for threads not cloned yet: counted too, no TID.
                CHECK(int_field(r, "starting_threads") > 0);
            } else if (int_field(r, "tid") == target.pid()) {
                ++as_pid;
            }
        }
        CHECK(as_pid == 1);   // the main thread itself
        CHECK(summaries <= 1);
        CHECK(target.require_exit(60s).is_success());
    }

    // With every thread reporting and nothing draining, glibc frees the
    // stacks of ended threads whose messages are still listed; reading the
    // list then hit unmapped memory and `event getmsg` failed with TD_DBERR
    // (3 runs in 5). The list now ends before such a record.
    TEST_CASE("event getmsg by hand on a churning target never fails")
    {
        require_attach();
        temp_file script("getmsg-script");
        {
            std::string text = "event set all\nevent enable on all\n";
            for (int i = 0; i < 40; ++i)
                text += "sleep 0.05\nevent getmsg\n";
            std::ofstream(script.path()) << text;
        }
        for (int round = 0; round < 4; ++round) {
            INFO("round ", round);
            // Attached once the storm is under way, as a user would.
            auto target = child_process::spawn({fixture_path("churn"), "8", "3000"});
            std::this_thread::sleep_for(50ms);
            auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(target.pid()), "-x",
                                               script.path()});
            auto status = tdctl.require_exit(60s);
            // 1: the last `event getmsg` found no message (TD_NOMSG), not a failure.
            CHECK_MESSAGE((status.is_success() || status.exit_code() == 1), status.describe(), "; stderr: ",
                          tdctl.stderr_text().substr(0, 2000));
            auto records = parse_records(tdctl.stdout_text());
            CHECK(records_of_type(records, "error").empty());
            CHECK(target.require_exit(60s).is_success());
        }
    }

    // `stop create`, `event getmsg` (consumes the creation), `continue`, then
    // `watch`: the same creation is reported a second time. `continue` removes
    // the one-shot stop site and moves the reporter's pc back onto the
    // site's `ret`; when `watch` plants the breakpoint again before that
    // thread has run, it traps a second time on the same report.
    TEST_CASE("a creation consumed by event getmsg is not reported again by a later watch")
    {
        require_ptrace();
        constexpr int rounds = 40;
        int duplicates = 0;
        std::string first;
        for (int round = 0; round < rounds; ++round) {
            temp_file record("churn-stop-record");
            auto run = run_tdctl({"--json", "-e", "event set create", "-e", "event enable on all", "-e",
                                  "stop create", "-e", "event getmsg", "-e", "continue", "-e", "watch --count 2",
                                  "--", fixture_path("churn"), "--record", record.path(), "2", "3"},
                                 20s);
            INFO(run.describe());
            REQUIRE(run.of_type("stopped").size() == 1);
            auto creates = run.events("TD_CREATE");
            REQUIRE(!creates.empty());
            // The first TD_CREATE is the one event getmsg consumed.
            CHECK(int_field(creates[0], "reporter") == 0);
            std::multiset<pid_t> tids = tid_multiset(creates);
            for (pid_t tid : std::set<pid_t>(tids.begin(), tids.end()))
                if (tids.count(tid) > 1) {
                    ++duplicates;
                    if (first.empty())
                        first = run.result.out;
                }
            CHECK(run.result.status.exit_code() == 0);
        }
        CHECK_MESSAGE(duplicates == 0, duplicates << " of " << rounds << " runs reported a creation twice; first:\n"
                                                  << first);
    }

    // `stop death` after `event enable on all` waited in vain for threads
    // created after the enable: glibc does not pass the flag on.
    TEST_CASE("stop: a thread created while it waits reports like its creator; its TD_DEATH stops the target")
    {
        require_attach();
        auto steer = child_process::spawn({fixture_path("steer")});
        REQUIRE(steer.ask("ping") == "pong");
        auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(steer.pid())});
        REQUIRE(tdctl.write_stdin("event set death\nevent enable on all\nstop death --for 10\n"));
        for (std::string type; type != "enable";)
            type = json::parse(tdctl.require_line(20s)).value("type", "");
        // `stop` plants its breakpoints right after the enable.
        std::this_thread::sleep_for(500ms);
        const steer_thread born = steer_spawn(steer);
        REQUIRE(steer.write_stdin(fmt::format("release {}\n", born.index)));
        json stopped;
        for (std::string type; type != "stopped";) {
            auto line = tdctl.read_line(15s);
            REQUIRE_MESSAGE(line.has_value(), "no stop; tdctl stderr: ", tdctl.stderr_text());
            stopped = json::parse(*line);
            type = stopped.value("type", "");
        }
        CHECK(stopped.value("event", "") == "TD_DEATH");
        CHECK(stopped.value("tid", 0) == born.tid);
        REQUIRE(tdctl.write_stdin("continue\nquit\n"));
        tdctl.close_stdin();
        CHECK(tdctl.require_exit(20s).is_success());
        CHECK(tracer_pid(steer.pid()) == 0);
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

    TEST_CASE("a bad count: watch --count x exits 2 naming the value")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "threads", "-e", "watch --count x"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, "-e 2"));
        CHECK(contains(run.result.err, "'x'"));
        CHECK(tracer_pid(t.pid()) == 0);
    }

    // The SIGCHLD signalfd stayed readable once a stop had been collected
    // past it, so the command loop's poll() returned at once, forever: tdctl
    // burned a CPU through every `sleep`/`watch` (1.25 s of CPU in 3 s).
    TEST_CASE("tdctl sleeps while the target runs: no busy loop in `sleep`")
    {
        require_attach();
        auto target = start_thread_trickle(4);
        const double before = children_cpu();
        auto run = run_tdctl({"-p", std::to_string(target.pid()), "-e", "sleep 2"}, 30s);
        const double used = children_cpu() - before;
        REQUIRE_MESSAGE(run.result.status.is_success(), run.describe());
        CHECK_MESSAGE(used < 0.3, fmt::format("tdctl used {:.3f} s of CPU in a 2 s sleep", used));
        CHECK(target.require_exit(30s).is_success());
    }
}
