// Regressions of the command line as a user drives it: each case failed
// before its fix.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"
#include "tests/integration/pty_process.hpp"

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

TEST_SUITE("cli regressions")
{
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

    // Ctrl-C at the prompt ends the running command only; the session then
    // ended with `quit` exited 130, as if tdctl had been interrupted.
    TEST_CASE("REPL: Ctrl-C ends `sleep`, then `quit` exits 0")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        pty_process tdctl({tdctl_path(), "-p", std::to_string(target.pid())});
        REQUIRE_MESSAGE(tdctl.wait_for("(tdctl) ", 20s), tdctl.screen());
        tdctl.type("sleep 30\r");
        std::this_thread::sleep_for(500ms);
        tdctl.type("\x03");
        REQUIRE_MESSAGE(tdctl.wait_for("(tdctl) ", 10s), "no prompt after Ctrl-C:\n", tdctl.screen());
        tdctl.type("quit\r");
        auto status = tdctl.wait_exit(20s);
        REQUIRE_MESSAGE(status.has_value(), tdctl.screen());
        CHECK_MESSAGE(WIFEXITED(*status), tdctl.screen());
        CHECK_MESSAGE(WEXITSTATUS(*status) == 0, tdctl.screen());
        CHECK(tracer_pid(target.pid()) == 0);
    }

    // `-e` took every following word (`-e threads bogus` ran `threads` and
    // dropped `bogus`); an unknown option was launched as a program; `-p abc`
    // printed a range of 300 digits.
    TEST_CASE("usage errors: stray words, unknown options, bad PIDs")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "1"});
        const std::string pid = std::to_string(target.pid());
        struct usage_case {
            std::vector<std::string> args;
            std::string says;
        };
        for (const auto& c : std::vector<usage_case>{
                 {{"-p", pid, "-e", "threads", "bogus"}, "not both"},
                 {{"-p", pid, "-e", "sleep 0.1", "threads"}, "not both"},
                 {{"--bogus"}, "unknown option --bogus"},
                 {{"--bogus", "-p", pid}, "unknown option --bogus"},
                 {{"-p", "abc"}, "not a process ID: abc"},
                 {{"-p", "0"}, "not a process ID: 0"},
                 {{"-p", "-5"}, "not a process ID"},
             }) {
            auto run = run_tdctl(c.args, 20s);
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 64);
            CHECK(run.result.err.find(c.says) != std::string::npos);
            CHECK(run.result.err.size() < 400);
        }
        CHECK(tracer_pid(target.pid()) == 0);
    }

    // Commands left when a launched target exited were dropped without a word.
    TEST_CASE("commands the target's exit leaves unrun are named")
    {
        require_ptrace();
        auto run = run_tdctl({"-e", "sleep 2", "-e", "threads", "-e", "# a comment", "-e", "lwpinfo all", "--", "sh",
                              "-c", "exit 3"},
                             30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 3);
        // A note: the output in text mode.
        CHECK((run.result.out + run.result.err).find("2 commands not run, from `threads` (-e 2)") != std::string::npos);
    }

    // `--batch` (never prompt) also stopped tdctl from reading commands on
    // stdin, and piped commands ran only once stdin reached its end.
    TEST_CASE("commands on stdin run as each line arrives, also with --batch")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        const std::string tid = std::to_string(target.pid());
        for (bool batch : {false, true}) {
            INFO("--batch: ", batch);
            std::vector<std::string> argv{tdctl_path(), "--json"};
            if (batch)
                argv.push_back("--batch");
            argv.insert(argv.end(), {"-p", tid});
            auto tdctl = child_process::spawn(argv);
            REQUIRE(tdctl.write_stdin("threads\n"));
            // The answer comes while stdin is still open.
            int threads = 0;
            while (threads < 3) {
                auto line = tdctl.read_line(20s);
                REQUIRE_MESSAGE(line.has_value(), "no answer to `threads` before end of input; stderr: ",
                                tdctl.stderr_text());
                auto rec = json::parse(*line, nullptr, false);
                threads += rec.value("type", "") == "thread";
            }
            REQUIRE(tdctl.write_stdin("quit\n"));
            tdctl.close_stdin();
            CHECK(tdctl.require_exit(20s).is_success());
            CHECK(tracer_pid(target.pid()) == 0);
        }
    }

    // Commands piped on stdin went on being read after `detach`, until end
    // of input: tdctl stayed with nothing to act on as long as the writer
    // kept the pipe open.
    TEST_CASE("stdin: `detach` ends the session while the input is still open")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(target.pid())});
        REQUIRE(tdctl.write_stdin("detach\n"));
        // stdin stays open: the session must end by itself.
        auto status = tdctl.wait_exit(20s);
        REQUIRE_MESSAGE(status.has_value(), "tdctl still reads stdin after detach; stderr: ", tdctl.stderr_text());
        CHECK(status->is_success());
        auto records = parse_records(tdctl.stdout_text());
        CHECK(records_of_type(records, "detached").size() == 1);
        CHECK(records_of_type(records, "error").empty());
        CHECK(tracer_pid(target.pid()) == 0);
    }

    // `-e detach -e threads` ran `threads` after the detach, which failed and
    // made the run exit 2.
    TEST_CASE("-e: commands after `detach` are named as not run; exit 0")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        auto run = run_tdctl({"-p", std::to_string(target.pid()), "-e", "detach", "-e", "threads"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        CHECK(run.result.out.find("detached from the target; 1 command not run, from `threads` (-e 2)") !=
              std::string::npos);
        CHECK(run.result.out.find("TRACEME") == std::string::npos);
        CHECK(tracer_pid(target.pid()) == 0);
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

    // `help event set` was a usage error: help takes the command's first word.
    TEST_CASE("help with a subcommand gives the command's help")
    {
        require_ptrace();
        auto run = run_tdctl({"-e", "help event set", "-e", "help stats show", "--", "true"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        CHECK(run.result.out.find("event set EVENTS [TID]") != std::string::npos);
        CHECK(run.result.out.find("stats enable") != std::string::npos);
    }

    // Failed writes were ignored: `-o /dev/full` or a closed stdout exited 0
    // with the records lost.
    TEST_CASE("a failed write to the output fails the run (exit 2) and the target is left clean")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        const std::string pid = std::to_string(target.pid());
        {
            auto run = run_tdctl({"-p", pid, "-o", "/dev/full", "-e", "threads", "-e", "watch --for 0.3"}, 30s);
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 2);
            CHECK(run.result.err.find("writing /dev/full failed: No space left on device") != std::string::npos);
        }
        {
            auto run = run_command({"/bin/sh", "-c", "exec \"$0\" -p \"$1\" -e threads >&-", tdctl_path(), pid}, 30s);
            INFO(run.describe());
            CHECK(run.status.exit_code() == 2);
            CHECK(run.err.find("standard output is closed") != std::string::npos);
        }
        CHECK(tracer_pid(target.pid()) == 0);
    }

    // `-x DIR` ran nothing and exited 0.
    TEST_CASE("-x with a directory is refused")
    {
        auto run = run_tdctl({"-x", "/tmp", "--", "true"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 64);
        CHECK(run.result.err.find("Is a directory") != std::string::npos);
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

    // `stats show` before any `stats enable` said "gathering off (frozen)",
    // as if a window had been taken and stopped.
    TEST_CASE("stats show before stats enable says how to start a window")
    {
        require_ptrace();
        auto run = run_tdctl({"-e", "stats show", "-e", "stats enable", "-e", "sleep 0.2", "-e", "stats disable", "-e",
                              "stats show", "-e", "kill", "--", fixture_path("sleeper"), "1"},
                             30s);
        INFO(run.describe());
        auto first = run.result.out.find("gathering off (`stats enable` starts a window)");
        CHECK(first != std::string::npos);
        CHECK(run.result.out.find("gathering off (averages frozen)", first) != std::string::npos);
    }
}
