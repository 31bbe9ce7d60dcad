// JSON records (--json): every record has `type`, `time` and `pid`; in launch
// mode they go to stderr, apart from the program's own output; usage errors
// are records too; and the fields records once lacked (`rusage_process`, the
// events `attached` lists, a null `startsym`, `detached`'s time). Each case
// failed before its fix.
#include <doctest/doctest.h>

#include <optional>
#include <set>
#include <string>
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

    // JSON gaps: the process total of `rusage collect all` existed in text
    // only; `attached` lacked the events the library reports; the main
    // thread's `startsym` was missing rather than null; `detached` had no time.
    TEST_CASE("JSON records: rusage_process, attached events, startsym null, detached time")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        auto run = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", "threads", "-e", "rusage start", "-e",
                              "rusage collect all"},
                             30s);
        INFO(run.describe());
        REQUIRE(run.result.status.is_success());
        auto attached = run.of_type("attached");
        REQUIRE(attached.size() == 1);
        CHECK(attached[0]["events"] == json::array({"TD_CREATE", "TD_DEATH"}));
        for (const auto& t : run.of_type("thread")) {
            REQUIRE(t.contains("startsym"));
            if (t["tid"] == target.pid())
                CHECK(t["startsym"].is_null());
            else
                CHECK(t["startsym"] == "sleeper_main");
        }
        auto rows = run.of_type("rusage");
        CHECK(rows.size() == 3);
        auto total = run.of_type("rusage_process");
        REQUIRE(total.size() == 1);
        CHECK(total[0]["pid"] == target.pid());
        std::int64_t minflt_rows = 0;
        for (const auto& r : rows)
            minflt_rows += int_field(r, "ru_minflt");
        // The process counts every thread, the exited ones too: at least the rows' sum.
        CHECK(int_field(total[0], "ru_minflt") >= minflt_rows);
        CHECK(total[0]["ru_utime"].is_number());
        auto detached = run.of_type("detached");
        REQUIRE(detached.size() == 1);
        CHECK(detached[0]["time"].is_number());
    }
}
