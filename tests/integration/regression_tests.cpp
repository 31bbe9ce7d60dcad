// Regression tests: each case failed before its fix, and repeats a racy
// scenario enough times to catch it again.
#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <csignal>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

TEST_SUITE("regressions")
{
    // The target must never die because of the controller (SPEC §9). A
    // detach while threads are being created and joined, right after
    // `watch --count N` ends, sometimes kills it: with SIGTRAP (a thread
    // that executed the int3 but whose trap was not handled as a breakpoint
    // gets the SIGTRAP delivered) or with SIGABRT "The futex facility
    // returned an unexpected error code" (a thread resumed at
    // __nptl_death_event+1 after the original bytes were restored runs the
    // padding and falls into the next function in libc).
    TEST_CASE("detach after watch --count during a thread storm never kills the target")
    {
        require_attach();
        constexpr int rounds = 150;
        int failures = 0;
        std::string first_failure;
        for (int round = 0; round < rounds && failures < 3; ++round) {
            temp_file record("churn-storm-record");
            auto target = child_process::spawn({fixture_path("churn"), "--record", record.path(), "--wait-start", "8",
                                                "50"});
            const pid_t pid = target.pid();
            REQUIRE(target.require_line(10s) == fmt::format("ready {}", pid));
            auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                               "watch --count 5"});
            REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
            REQUIRE(target.write_stdin("x"));
            auto tdctl_status = tdctl.require_exit(20s);
            auto target_status = target.require_exit(20s);
            if (!tdctl_status.is_success() || !target_status.is_success()) {
                ++failures;
                if (first_failure.empty())
                    first_failure = fmt::format("round {}: tdctl {}, target {}; target stderr: {}\ntdctl stdout:\n{}"
                                                "tdctl stderr: {}",
                                                round, tdctl_status.describe(), target_status.describe(),
                                                target.stderr_text(), tdctl.stdout_text(), tdctl.stderr_text());
            }
        }
        CHECK_MESSAGE(failures == 0, failures << " bad rounds; first: " << first_failure);
    }

    // A launched target whose threads die around the end of a counted watch:
    // tdctl detaches, then waits for the target forever. A thread that
    // exited while traced stays a zombie until its tracer reaps it
    // (waitpid(tid, __WALL)); tdctl forgets it at detach, so the leader can
    // never be reaped and wait_launched_exit() polls forever.
    TEST_CASE("launch + watch --count during a thread storm: tdctl ends with the target's status")
    {
        require_ptrace();
        constexpr int rounds = 150;
        for (int round = 0; round < rounds; ++round) {
            CAPTURE(round);
            temp_file record("churn-count-record");
            auto run = run_tdctl({"--json", "-e", "watch --count 5", "--", fixture_path("churn"), "--record",
                                  record.path(), "8", "50"},
                                 15s);
            INFO(run.describe());
            REQUIRE(run.result.status.exit_code() == 0);
            auto exits = run.of_type("exit");
            REQUIRE(exits.size() == 1);
            REQUIRE(int_field(exits[0], "status") == 0);
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

    // Attaching to a process that is creating and joining threads: tdctl
    // sometimes dies with SIGSEGV (an exception in traced_process::attach()
    // unwinds into ~traced_process() -> detach() -> stop_all() -> on_clone(),
    // which dereferences memory_ before attach() created it), sometimes
    // refuses with a wrong reason ("no such process", "already traced by
    // <tdctl itself>"), and `threads` sometimes fails with TD_DBERR.
    TEST_CASE("attach to a process in a thread storm: every attach works, tdctl never crashes")
    {
        require_attach();
        constexpr int attaches_wanted = 120;
        int attaches = 0;
        std::vector<std::string> problems;
        auto deadline = std::chrono::steady_clock::now() + 60s;
        while (attaches < attaches_wanted && std::chrono::steady_clock::now() < deadline) {
            temp_file record("churn-storm-record");
            auto target = child_process::spawn({fixture_path("churn"), "--record", record.path(), "8", "500"});
            const pid_t pid = target.pid();
            REQUIRE(wait_until([&] { return count_kind(parse_record(read_text_file(record.path()).value_or("")),
                                                       "thread") > 0; },
                               10s));
            while (attaches < attaches_wanted && !target.wait_exit(0ms)) {
                auto run = run_tdctl({"-p", std::to_string(pid), "-e", "threads"}, 20s);
                ++attaches;
                const auto& st = run.result.status;
                if (st.is_signaled()) {
                    problems.push_back("tdctl " + st.describe() + ": " + run.result.err);
                } else if (st.exit_code() != 0) {
                    // A refusal is only right for a process that is gone.
                    auto state = proc_state(pid);
                    if (state && *state != 'Z')
                        problems.push_back(fmt::format("exit {} while the target runs: {}", st.exit_code(),
                                                       run.result.err));
                }
            }
            auto status = target.require_exit(30s);
            if (!status.is_success())
                problems.push_back("target " + status.describe() + ": " + target.stderr_text());
        }
        std::string all;
        for (const auto& p : problems)
            all += p + "\n";
        CHECK_MESSAGE(problems.empty(), problems.size() << " problems in " << attaches << " attaches:\n" << all);
    }

    // A signal to tdctl in the middle of a watch while the target keeps
    // creating threads: tdctl sometimes never exits. Seen stuck in
    // remove_breakpoint -> finish_step_over -> consume_owed_sigtrap ->
    // waiter::wait_for(tid): a blocking waitpid on a thread that was only
    // resumed in place (pc one past a `cc c3` site) and owes no SIGTRAP, so
    // it runs on and never stops again.
    TEST_CASE("a signal to tdctl while the target storms threads and signals: the target never notices")
    {
        require_attach();
        constexpr int signals_to_send = 1000;
        for (int round = 0; round < 15; ++round) {
            const int sig = std::array{SIGTERM, SIGINT, SIGHUP}[round % 3];
            CAPTURE(round);
            CAPTURE(sig);
            temp_file record("signals-record");
            auto target = child_process::spawn({fixture_path("signals"), "--record", record.path(), "--wait-start",
                                                std::to_string(signals_to_send)});
            const pid_t pid = target.pid();
            REQUIRE(target.require_line(10s) == fmt::format("ready {}", pid));
            auto libc = find_module(pid, "libc.so.6");
            const auto create_addr = libc.address_of("__nptl_create_event");
            const auto original = read_proc_mem(pid, create_addr, 16);

            auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "watch"});
            REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
            CHECK(wait_until([&] { return read_proc_mem(pid, create_addr, 16) != original; }, 10s));
            REQUIRE(target.write_stdin("x"));

            std::vector<json> events;
            while (events.size() < 20) {
                auto line = tdctl.read_line(10s);
                REQUIRE_MESSAGE(line.has_value(), "tdctl printed no event; stderr: " << tdctl.stderr_text());
                auto rec = json::parse(*line, nullptr, false);
                REQUIRE_MESSAGE(!rec.is_discarded(), "not JSON: " << *line);
                if (rec.value("type", "") == "event")
                    events.push_back(rec);
            }
            REQUIRE(tdctl.send_signal(sig));
            auto status = tdctl.require_exit(20s);
            INFO("tdctl stdout:\n" << tdctl.stdout_text() << "stderr:\n" << tdctl.stderr_text());
            CHECK(status.exit_code() == 128 + sig);
            auto records = parse_records(tdctl.stdout_text());
            CHECK(records_of_type(records, "detached").size() == 1);

            if (!target.wait_exit(0ms)) {
                // Still storming: the breakpoint is gone and nobody traces it.
                try {
                    CHECK(read_proc_mem(pid, create_addr, 16) == original);
                    CHECK(tracer_pid(pid) == 0);
                } catch (const tdctl::error& e) {
                    CHECK_MESSAGE(target.wait_exit(5s).has_value(), "cannot read the live target: " << e.what());
                }
            }
            auto target_status = target.require_exit(30s);
            auto facts = read_record(record.path());
            INFO("record: " << format_record(facts));
            CHECK_MESSAGE(target_status.is_success(), target_status.describe() << "; " << target.stderr_text());
            CHECK(count_kind(facts, "signal-sent") == signals_to_send);
            CHECK(count_kind(facts, "signal-got") == signals_to_send);
            CHECK(count_kind(facts, "done") == 1);
            auto recorded = to_multiset(thread_tids(facts));
            for (const auto& e : events)
                CHECK_MESSAGE(recorded.contains(static_cast<pid_t>(int_field(e, "tid"))),
                              "not a thread of the fixture: " << e.dump());
        }
    }
}
