// What a new user met (issue 12): small faults of the command line, JSON
// records that lacked `time` and `pid` or shared a stream with the launched
// program, batch exit statuses that could not tell "nothing there" or "timed
// out" from success, and a `stop` that missed threads created while it
// waited. Each case failed before its fix.
#include <doctest/doctest.h>

#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

/// Every record has "type", "time" (a number) and "pid" (the target's, or
/// null where there is none); "" when so, else what is wrong.
std::string records_without_type_time_pid(const std::vector<json>& records, std::optional<pid_t> pid)
{
    std::string bad;
    for (const auto& r : records) {
        const bool ok = r.is_object() && r.contains("type") && r["type"].is_string() && r.contains("time") &&
                        r["time"].is_number() && r.contains("pid") &&
                        (pid ? r["pid"] == *pid : r["pid"].is_null() || r["pid"].is_number_integer());
        if (!ok)
            bad += r.dump() + "\n";
    }
    return bad;
}

std::set<std::string> types_of(const std::vector<json>& records)
{
    std::set<std::string> types;
    for (const auto& r : records)
        types.insert(r.value("type", ""));
    return types;
}

}  // namespace

TEST_SUITE("small faults")
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

    // `lwpinfo 99999` printed the table's column headings, then the error.
    TEST_CASE("lwpinfo and rusage collect of an unknown TID: the error alone, no table heading")
    {
        require_attach();
        sleeper_target t;
        const std::string tid = std::to_string(unused_pid());
        auto lwp = run_tdctl({"-p", t.pid_text(), "-e", "lwpinfo " + tid}, 30s);
        INFO(lwp.describe());
        CHECK(lwp.result.status.exit_code() == 2);
        CHECK(contains(lwp.result.err, "ESRCH"));
        CHECK_FALSE(contains(lwp.result.out, "lwp_utime"));
        auto ru = run_tdctl({"-p", t.pid_text(), "-e", "rusage start", "-e", "rusage collect " + tid}, 30s);
        INFO(ru.describe());
        CHECK(ru.result.status.exit_code() == 2);
        CHECK(contains(ru.result.err, "ESRCH"));
        CHECK_FALSE(contains(ru.result.out, "utime s"));
        CHECK(tracer_pid(t.pid()) == 0);
    }
}

TEST_SUITE("json records")
{
    // In launch mode the program's own lines came in tdctl's JSON stream, and
    // `thread`, `lwpinfo`, `backtrace` and `error` records had no `time`,
    // most records no `pid`.
    TEST_CASE("tdctl --json -- a program that prints lines: every line of tdctl's stream is a record with type, "
              "time and pid; the program's lines are on stdout alone")
    {
        require_ptrace();
        temp_file record("ux-json-churn");
        const std::string program =
            fmt::format("echo line-one; echo line-two; exec {} --record {} 2 3", fixture_path("churn"), record.path());
        auto run = run_command({tdctl_path(), "--json", "-e", "threads", "-e", "lwpinfo", "-e", "bt", "-e",
                                "event getmsg", "-e", "event addr all", "-e", "stats enable", "-e", "rusage start",
                                "-e", "rusage collect all", "-e", "bogus", "-e", "threads", "-e", "continue", "-e",
                                "continue", "--", "/bin/sh", "-c", program},
                               60s);
        INFO(run.describe());
        // `bogus` failed the batch and the commands after it ran; the second
        // `continue` notes that the target already runs.
        CHECK(run.status.exit_code() == 2);
        // Every line on stderr parses (json_lines throws on one that does not).
        auto records = json_lines(run.err);
        REQUIRE(!records.empty());
        REQUIRE(records.front().value("type", "") == "launched");
        const pid_t pid = records.front().at("pid").get<pid_t>();
        CHECK_MESSAGE(records_without_type_time_pid(records, pid).empty(),
                      records_without_type_time_pid(records, pid));
        for (const char* type : {"launched", "thread", "lwpinfo", "backtrace", "getmsg", "event_addr",
                                 "stats_state", "rusage_state", "rusage", "error", "note", "detached", "exit"})
            CHECK_MESSAGE(types_of(records).contains(type), "no ", type, " record");
        // The program's stdout is its own, and none of it reached tdctl's stream.
        CHECK(run.out == "line-one\nline-two\n");
        CHECK_FALSE(contains(run.err, "line-one"));
    }

    TEST_CASE("attach: event, top, watch_end and time_split records have type, time and pid")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("churn"), "4", "3000"});
        std::this_thread::sleep_for(50ms);
        auto run = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", "watch --count 4", "-e",
                              "top --interval 0.2 --count 1 --limit 3"},
                             60s);
        INFO(run.describe().substr(0, 4000));
        CHECK(run.result.status.exit_code() == 0);
        CHECK_MESSAGE(records_without_type_time_pid(run.records, target.pid()).empty(),
                      records_without_type_time_pid(run.records, target.pid()));
        for (const char* type : {"attached", "event", "watch_end", "time_split", "top", "top_process", "detached"})
            CHECK_MESSAGE(types_of(run.records).contains(type), "no ", type, " record");
    }

    // A usage error (exit 64) printed one human line and no record.
    TEST_CASE("usage errors are records too: type error, error usage, time, pid")
    {
        auto attach_side = run_tdctl({"--json", "--bogus"}, 30s);
        INFO(attach_side.describe());
        CHECK(attach_side.result.status.exit_code() == 64);
        auto records = parse_records(attach_side.result.out);
        REQUIRE(records.size() == 1);
        CHECK(records[0].value("type", "") == "error");
        CHECK(records[0].value("error", "") == "usage");
        CHECK(records_without_type_time_pid(records, std::nullopt).empty());
        CHECK(contains(attach_side.result.err, "--bogus"));

        // With a program named the records would go to stderr: the record
        // is there, and no human line beside it.
        auto launch_side = run_command({tdctl_path(), "--json", "-p", "1", "--", "true"}, 30s);
        INFO(launch_side.describe());
        CHECK(launch_side.status.exit_code() == 64);
        auto on_stderr = json_lines(launch_side.err);
        REQUIRE(on_stderr.size() == 1);
        CHECK(on_stderr[0].value("error", "") == "usage");
        CHECK(on_stderr[0]["pid"] == 1);
        CHECK(launch_side.out.empty());
    }
}

TEST_SUITE("batch statuses")
{
    // A `stop` that timed out and an `event getmsg` that found TD_NOMSG
    // both exited 0: a script could not tell them from success.
    TEST_CASE("exit 1 when the last command found nothing, 3 when it timed out, 0 otherwise")
    {
        require_attach();
        sleeper_target t;
        auto nothing = run_tdctl({"-p", t.pid_text(), "-e", "event getmsg"}, 30s);
        INFO(nothing.describe());
        CHECK(nothing.result.status.exit_code() == 1);
        CHECK(contains(nothing.result.out, "TD_NOMSG"));
        auto timed_out = run_tdctl({"-p", t.pid_text(), "-e", "stop create --for 0.3"}, 30s);
        INFO(timed_out.describe());
        CHECK(timed_out.result.status.exit_code() == 3);
        auto later_ok = run_tdctl({"-p", t.pid_text(), "-e", "event getmsg", "-e", "threads"}, 30s);
        INFO(later_ok.describe());
        CHECK(later_ok.result.status.exit_code() == 0);
        auto no_event = run_tdctl({"--json", "-p", t.pid_text(), "-e", "event addr sleep"}, 30s);
        INFO(no_event.describe());
        CHECK(no_event.result.status.exit_code() == 1);
        CHECK(no_event.of_type("error").empty());
        CHECK(tracer_pid(t.pid()) == 0);
    }

    // Without a terminal `-e bogus -e lwpinfo` ended at `bogus` and never
    // said that `lwpinfo` was not run. Now the commands after a failed one
    // run (gdb -batch -ex), and the exit status says one failed.
    TEST_CASE("a failed -e command: the commands after it run, exit 2")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "bogus", "-e", "lwpinfo", "-e", "threads"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, "-e 1: unknown command 'bogus'"));
        CHECK_FALSE(contains(run.result.out, "not run"));
        CHECK(contains(run.result.out, "lwp_utime"));
        CHECK(contains(run.result.out, "TRACEME"));
        CHECK(tracer_pid(t.pid()) == 0);
    }
}

TEST_SUITE("stop")
{
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
}
