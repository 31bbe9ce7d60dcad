// Tests of the test-support library and of the fixtures themselves, run
// without tdctl: each fixture must do and record what its README says.
#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <set>
#include <sstream>

#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fstream>

#include "base/error.hpp"
#include "tests/support/support.hpp"

using namespace tdctl::test;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> words(const std::string& line)
{
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string w; in >> w;)
        out.push_back(w);
    return out;
}

bool has_tid(pid_t pid, pid_t tid)
{
    auto tids = task_tids(pid);
    return std::find(tids.begin(), tids.end(), tid) != tids.end();
}

}  // namespace

TEST_SUITE("child_process")
{
    TEST_CASE("run_command captures status and both outputs")
    {
        auto r = run_command({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, 5s);
        CHECK(r.status.is_exited());
        CHECK(r.status.exit_code() == 3);
        CHECK(r.out == "out\n");
        CHECK(r.err == "err\n");
        CHECK(r.describe().find("exited 3") != std::string::npos);
    }

    TEST_CASE("run_command passes stdin and environment additions")
    {
        run_options opts;
        opts.stdin_text = "from stdin\n";
        opts.env = {{"TDCTL_SUPPORT_X", "yes"}, {"PATH", "/usr/bin:/bin"}};
        auto r = run_command({"sh", "-c", "read line; echo \"$line/$TDCTL_SUPPORT_X\""}, 5s, opts);
        CHECK(r.status.is_success());
        CHECK(r.out == "from stdin/yes\n");
    }

    TEST_CASE("run_command reports a signal death")
    {
        auto r = run_command({"/bin/sh", "-c", "kill -TERM $$"}, 5s);
        CHECK(r.status.is_signaled());
        CHECK(r.status.term_signal() == SIGTERM);
        CHECK(r.status.describe() == "killed by signal 15 (SIGTERM)");
    }

    TEST_CASE("run_command of a command that hangs throws after the timeout")
    {
        auto start = std::chrono::steady_clock::now();
        CHECK_THROWS_WITH_AS(run_command({"/bin/sh", "-c", "echo partial; exec sleep 30"}, 300ms),
                             doctest::Contains("did not finish within 300 ms"), std::runtime_error);
        CHECK(std::chrono::steady_clock::now() - start < 5s);
    }

    TEST_CASE("exec failure of a non-existent program is reported with its errno")
    {
        try {
            auto child = child_process::spawn({"/nonexistent/tdctl-no-such-program"});
            FAIL("spawn of a missing program succeeded");
        } catch (const tdctl::error& e) {
            CHECK(e.domain() == tdctl::error_domain::os);
            CHECK(e.code() == ENOENT);
            CHECK(std::string(e.what()).find("/nonexistent/tdctl-no-such-program") != std::string::npos);
        }
        CHECK_THROWS_AS(run_command({"/nonexistent/tdctl-no-such-program"}, 1s), tdctl::error);
        // A file that exists but is not executable: EACCES.
        temp_file plain("not-executable");
        std::ofstream(plain.path()) << "#!/bin/sh\n";
        try {
            auto child = child_process::spawn({plain.path()});
            FAIL("spawn of a non-executable file succeeded");
        } catch (const tdctl::error& e) {
            CHECK(e.code() == EACCES);
        }
    }

    TEST_CASE("a sleeper that never exits: wait_exit times out, the destructor kills and reaps")
    {
        temp_file record("sleeper-record");
        pid_t pid = 0;
        {
            auto child = child_process::spawn({fixture_path("sleeper"), "--record", record.path(), "3"});
            pid = child.pid();
            auto facts = wait_for_fact(record.path(), "done", 1, 10s);
            CHECK(count_kind(facts, "thread") == 3);
            CHECK(facts.front().kind == "start");
            CHECK(facts.front().id() == pid);
            CHECK(task_tids(pid).size() == 4);
            for (pid_t tid : thread_tids(facts, "sleeper"))
                CHECK(has_tid(pid, tid));

            auto start = std::chrono::steady_clock::now();
            CHECK_FALSE(child.wait_exit(200ms).has_value());
            auto waited = std::chrono::steady_clock::now() - start;
            CHECK(waited >= 200ms);
            CHECK(waited < 3s);
            CHECK_THROWS_WITH_AS(child.require_exit(50ms), doctest::Contains("did not exit within 50 ms"),
                                 std::runtime_error);
        }
        // Reaped by the destructor: no longer our child.
        int status = 0;
        CHECK(::waitpid(pid, &status, WNOHANG) == -1);
        CHECK(errno == ECHILD);
    }

    TEST_CASE("send_signal: SIGSTOP, SIGCONT and SIGTERM are seen in /proc and in the status")
    {
        temp_file record("sleeper-record");
        auto child = child_process::spawn({fixture_path("sleeper"), "--record", record.path(), "1"});
        wait_for_fact(record.path(), "done", 1, 10s);
        REQUIRE(child.send_signal(SIGSTOP));
        CHECK(wait_until([&] { return proc_state(child.pid()) == 'T'; }, 5s));
        REQUIRE(child.send_signal(SIGCONT));
        CHECK(wait_until([&] { return proc_state(child.pid()) == 'S'; }, 5s));
        CHECK(tracer_pid(child.pid()) == 0);
        REQUIRE(child.send_signal(SIGTERM));
        auto st = child.require_exit(5s);
        CHECK(st.term_signal() == SIGTERM);
        CHECK_FALSE(child.send_signal(SIGTERM));  // reaped: never signals a reused pid
    }

    TEST_CASE("a child reaped by someone else is tolerated (ECHILD)")
    {
        auto child = child_process::spawn({fixture_path("sleeper"), "0"});
        ::kill(child.pid(), SIGKILL);
        int status = 0;
        REQUIRE(::waitpid(child.pid(), &status, 0) == child.pid());
        auto st = child.require_exit(2s);
        CHECK_FALSE(st.is_known());
        CHECK(st.describe() == "reaped elsewhere (status unknown)");
    }

    TEST_CASE("the destructor reaps a child this process traces and left stopped")
    {
        if (auto reason = ptrace_unavailable_reason()) {
            MESSAGE("not checked: " << *reason);
            return;
        }
        temp_file record("sleeper-record");
        pid_t pid = 0;
        auto start = std::chrono::steady_clock::now();
        {
            auto child = child_process::spawn({fixture_path("sleeper"), "--record", record.path(), "3"});
            pid = child.pid();
            wait_for_fact(record.path(), "done", 1, 10s);
            // As a test that forgot to detach would: every task seized with
            // exit stops on, and put in a ptrace stop.
            for (pid_t tid : task_tids(pid)) {
                REQUIRE(::ptrace(PTRACE_SEIZE, tid, 0, PTRACE_O_TRACEEXIT | PTRACE_O_TRACECLONE) == 0);
                REQUIRE(::ptrace(PTRACE_INTERRUPT, tid, 0, 0) == 0);
            }
            CHECK(tracer_pid(pid) == ::getpid());
            // wait_exit must not eat the tracer's stop reports.
            CHECK_FALSE(child.wait_exit(50ms).has_value());
            int status = 0;
            CHECK(::waitpid(pid, &status, __WALL) == pid);
            CHECK(WIFSTOPPED(status));
        }
        CHECK(std::chrono::steady_clock::now() - start < 8s);
        int status = 0;
        CHECK(::waitpid(pid, &status, WNOHANG | __WALL) == -1);
        CHECK(errno == ECHILD);
    }

    TEST_CASE("waiting for one child never reaps another")
    {
        pid_t other = ::fork();
        REQUIRE(other >= 0);
        if (other == 0)
            ::_exit(7);
        auto r = run_command({"/bin/true"}, 5s);
        CHECK(r.status.is_success());
        {
            auto child = child_process::spawn({fixture_path("sleeper"), "0"});
            child.kill_and_reap();
        }
        int status = 0;
        REQUIRE(::waitpid(other, &status, 0) == other);
        CHECK(WEXITSTATUS(status) == 7);
    }

    TEST_CASE("stdout can go to a file")
    {
        temp_file out("stdout");
        spawn_options opts;
        opts.stdout_file = out.path();
        auto child = child_process::spawn({"/bin/echo", "to a file"}, opts);
        CHECK(child.require_exit(5s).is_success());
        CHECK(read_text_file(out.path()) == "to a file\n");
        CHECK_FALSE(child.read_line(10ms).has_value());
    }

    TEST_CASE("read_line returns lines, then a last unterminated line, then nullopt at end of file")
    {
        auto child = child_process::spawn({"/bin/sh", "-c", "printf 'one\\ntwo\\nthree'"});
        CHECK(child.read_line(5s) == "one");
        CHECK(child.read_line(5s) == "two");
        CHECK(child.read_line(5s) == "three");
        CHECK_FALSE(child.read_line(100ms).has_value());
        CHECK(child.require_exit(5s).is_success());
        CHECK(child.stdout_text() == "one\ntwo\nthree");
    }
}

TEST_SUITE("fixtures")
{
    TEST_CASE("steer: spawn, tids, setname, release, join, quit")
    {
        temp_file record("steer-record");
        auto steer = child_process::spawn({fixture_path("steer"), "--record", record.path()});
        const pid_t pid = steer.pid();

        auto a = words(steer.ask("spawn"));
        auto b = words(steer.ask("spawn"));
        REQUIRE(a.size() == 4);
        REQUIRE(b.size() == 4);
        CHECK(a[0] == "thread");
        CHECK(a[1] == "0");
        CHECK(b[1] == "1");
        const pid_t tid_a = std::stoi(a[2]);
        const pid_t tid_b = std::stoi(b[2]);
        CHECK(a[3].starts_with("0x"));
        CHECK(has_tid(pid, tid_a));
        CHECK(has_tid(pid, tid_b));
        CHECK(task_tids(pid).size() == 3);
        CHECK(steer.ask("tids") == fmt::format("tids {} {} {}", pid, tid_a, tid_b));

        CHECK(steer.ask("setname 1 x y) z") == "named 1");
        CHECK(task_comm(pid, tid_b) == "x y) z");
        CHECK(task_state(pid, tid_b).has_value());

        // The record agrees with the answers.
        auto facts = read_record(record.path());
        auto threads = facts_of_kind(facts, "thread");
        REQUIRE(threads.size() == 2);
        CHECK(threads[0].id() == tid_a);
        CHECK(threads[0].handle() == std::stoull(a[3], nullptr, 16));
        CHECK(threads[0].label() == "steer");

        CHECK(steer.ask("join 0").starts_with("error"));  // not released: would block
        CHECK(steer.ask("release 0") == "released 0");
        CHECK(steer.ask("join 0") == "joined 0");
        CHECK(wait_until([&] { return !has_tid(pid, tid_a); }, 5s));
        CHECK(steer.ask("tids") == fmt::format("tids {} {}", pid, tid_b));
        CHECK(steer.ask("release 1") == "released 1");
        CHECK(steer.ask("join 1") == "joined 1");
        CHECK(steer.ask("join 1").starts_with("error"));

        auto d = words(steer.ask("spawn-detached"));
        REQUIRE(d.size() == 4);
        CHECK(d[1] == "2");
        CHECK(steer.ask("release 2") == "released 2");
        CHECK(steer.ask("join 2").starts_with("error"));
        CHECK(wait_until([&] { return !has_tid(pid, std::stoi(d[2])); }, 5s));

        CHECK(steer.ask("frobnicate") == "error unknown command: frobnicate");
        CHECK(steer.ask("release 99").starts_with("error"));
        CHECK(steer.ask("ping") == "pong");
        CHECK(steer.ask("quit") == "bye");
        auto st = steer.require_exit(5s);
        CHECK_MESSAGE(st.is_success(), st.describe());

        facts = read_record(record.path());
        CHECK(count_kind(facts, "thread") == 3);
        CHECK(count_kind(facts, "exit") == 3);
        CHECK(facts.back().kind == "done");
    }

    TEST_CASE("churn 2 5 records exactly 12 threads")
    {
        temp_file record("churn-record");
        auto r = run_command({fixture_path("churn"), "--record", record.path(), "2", "5"}, 30s);
        REQUIRE_MESSAGE(r.status.is_success(), r.describe());
        auto facts = read_record(record.path());
        CHECK(count_kind(facts, "thread") == 12);
        CHECK(thread_tids(facts, "outer").size() == 2);
        CHECK(thread_tids(facts, "inner").size() == 10);
        CHECK(count_kind(facts, "start") == 1);
        CHECK(facts.back().kind == "done");
        pid_t pid = facts.front().id();
        for (pid_t tid : thread_tids(facts))
            CHECK(tid != pid);
    }

    TEST_CASE("churn with defaults: 4008 thread creations")
    {
        temp_file record("churn-record");
        auto r = run_command({fixture_path("churn"), "--record", record.path()}, 50s);
        REQUIRE_MESSAGE(r.status.is_success(), r.describe());
        auto facts = read_record(record.path());
        CHECK(thread_tids(facts, "outer").size() == 8);
        CHECK(thread_tids(facts, "inner").size() == 4000);
    }

    TEST_CASE("churn variants without nptl symbols run too")
    {
        for (const char* name : {"churn_static", "churn_static_stripped", "churn_musl"}) {
            CAPTURE(name);
            if (!has_fixture(name)) {
                MESSAGE(name << " not built (musl-gcc missing?)");
                continue;
            }
            temp_file record("churn-record");
            auto r = run_command({fixture_path(name), "--record", record.path(), "3", "4"}, 30s);
            REQUIRE_MESSAGE(r.status.is_success(), r.describe());
            CHECK(count_kind(read_record(record.path()), "thread") == 15);
        }
    }

    TEST_CASE("--wait-start: ready line, nothing done until a byte arrives")
    {
        temp_file record("churn-record");
        auto child = child_process::spawn({fixture_path("churn"), "--record", record.path(), "--wait-start", "1", "2"});
        CHECK(child.require_line(5s) == fmt::format("ready {}", child.pid()));
        auto facts = read_record(record.path());
        CHECK(facts.size() == 1);
        CHECK(task_tids(child.pid()).size() == 1);
        REQUIRE(child.write_stdin("g"));
        CHECK(child.require_exit(10s).is_success());
        CHECK(count_kind(read_record(record.path()), "thread") == 3);
    }

    TEST_CASE("named: the thread's comm holds spaces and a parenthesis")
    {
        temp_file record("named-record");
        auto child = child_process::spawn({fixture_path("named"), "--record", record.path()});
        auto facts = wait_for_fact(record.path(), "done", 1, 10s);
        auto threads = facts_of_kind(facts, "thread");
        REQUIRE(threads.size() == 1);
        CHECK(threads[0].label() == "a b) c");
        CHECK(task_comm(child.pid(), threads[0].id()) == "a b) c");
        CHECK(task_state(child.pid(), threads[0].id()) == 'S');
    }

    TEST_CASE("forker: three forks and a vfork, all children exit 0")
    {
        temp_file record("forker-record");
        auto r = run_command({fixture_path("forker"), "--record", record.path()}, 30s);
        REQUIRE_MESSAGE(r.status.is_success(), r.describe());
        auto facts = read_record(record.path());
        CHECK(count_kind(facts, "fork") == 4);
        auto exits = facts_of_kind(facts, "child-exit");
        REQUIRE(exits.size() == 4);
        for (const auto& e : exits)
            CHECK(e.number(1) == 0);
        CHECK(thread_tids(facts, "child").size() == 9);
        CHECK(thread_tids(facts, "churner").size() == 1);
        CHECK(facts.back().kind == "done");
    }

    TEST_CASE("forker exec-thread: a second image in the same process")
    {
        temp_file record("forker-record");
        auto r = run_command({fixture_path("forker"), "--record", record.path(), "exec-thread"}, 30s);
        REQUIRE_MESSAGE(r.status.is_success(), r.describe());
        auto facts = read_record(record.path());
        auto starts = facts_of_kind(facts, "start");
        REQUIRE(starts.size() == 2);
        CHECK(starts[0].id() == starts[1].id());
        CHECK(thread_tids(facts, "exec").size() == 1);
        CHECK(thread_tids(facts, "stage2").size() == 3);
        CHECK(facts.back().kind == "done");
    }

    TEST_CASE("signals: every SIGUSR1 sent arrives")
    {
        temp_file record("signals-record");
        auto r = run_command({fixture_path("signals"), "--record", record.path(), "20"}, 30s);
        REQUIRE_MESSAGE(r.status.is_success(), r.describe());
        auto facts = read_record(record.path());
        auto sent = facts_of_kind(facts, "signal-sent");
        auto got = facts_of_kind(facts, "signal-got");
        CHECK(sent.size() == 20);
        CHECK(got.size() == 20);
        auto target = thread_tids(facts, "target");
        REQUIRE(target.size() == 1);
        for (const auto& f : got) {
            CHECK(f.id() == target[0]);
            CHECK(f.number(1) == SIGUSR1);
        }
        CHECK(facts.back().kind == "done");
    }

    TEST_CASE("busy: K spinning and M sleeping threads for a while")
    {
        temp_file record("busy-record");
        auto child = child_process::spawn({fixture_path("busy"), "--record", record.path(), "2", "1", "1"});
        auto facts = wait_for_fact(record.path(), "done", 1, 10s);
        CHECK(thread_tids(facts, "spin").size() == 2);
        CHECK(thread_tids(facts, "sleep").size() == 1);
        auto st = child.require_exit(10s);
        CHECK_MESSAGE(st.is_success(), st.describe());
    }

    TEST_CASE("a fixture's usage error exits 2 with a message")
    {
        auto r = run_command({fixture_path("busy"), "1"}, 5s);
        CHECK(r.status.exit_code() == 2);
        CHECK(r.err.find("usage: busy") != std::string::npos);
        r = run_command({fixture_path("churn"), "x", "1"}, 5s);
        CHECK(r.status.exit_code() == 2);
        CHECK(r.err.find("OUTER must be a non-negative number") != std::string::npos);
    }
}

TEST_SUITE("parsers")
{
    TEST_CASE("record: kinds, fields, labels with spaces, hex handles")
    {
        auto facts = parse_record("start 100\n"
                                  "thread 101 0x7f00aa a b) c\n"
                                  "exit 101\n"
                                  "signal-sent 101 10\n"
                                  "signal-got 101 10\n"
                                  "fork 200\n"
                                  "child-exit 200 256\n"
                                  "done\n"
                                  "thread 102 0x7f");  // still being written: ignored
        REQUIRE(facts.size() == 8);
        CHECK(facts[0].id() == 100);
        CHECK(facts[1].handle() == 0x7f00aa);
        CHECK(facts[1].label() == "a b) c");
        CHECK(facts[6].number(1) == 256);
        CHECK(facts[7].fields.empty());
        CHECK(count_kind(facts, "thread") == 1);
        CHECK(thread_tids(facts) == std::vector<pid_t>{101});
        CHECK(thread_tids(facts, "other").empty());
    }

    TEST_CASE("record: malformed lines are errors showing the line")
    {
        CHECK_THROWS_WITH_AS(parse_record("bogus 1\n"), doctest::Contains("'bogus 1'"), std::runtime_error);
        CHECK_THROWS_WITH_AS(parse_record("start\n"), doctest::Contains("fewer than 1"), std::runtime_error);
        CHECK_THROWS_WITH_AS(parse_record("exit 1 2\n"), doctest::Contains("more than 1"), std::runtime_error);
        CHECK_THROWS_WITH_AS(parse_record("start 1\nexit x\n"), doctest::Contains("line 2"), std::runtime_error);
        CHECK_THROWS_AS(parse_record("thread 1 0x2\n"), std::runtime_error);
        CHECK_THROWS_AS(parse_record("\n"), std::runtime_error);
    }

    TEST_CASE("wait_for_fact times out with the record in the message")
    {
        temp_file missing("never-written");
        CHECK_THROWS_WITH_AS(wait_for_fact(missing.path(), "done", 1, 50ms), doctest::Contains("has 0 'done' facts"),
                             std::runtime_error);
    }

    TEST_CASE("stat state after the last parenthesis")
    {
        CHECK(parse_stat_state("1234 (a b) c) S 1 2 3") == 'S');
        CHECK(parse_stat_state("1 (x) t 0") == 't');
        CHECK_FALSE(parse_stat_state("garbage").has_value());
        CHECK_FALSE(parse_stat_state("1 (x)").has_value());
    }

    TEST_CASE("maps lines, with and without paths")
    {
        auto maps = parse_maps("55d0c0000000-55d0c0001000 r--p 00000000 fd:01 123 /usr/bin/a b\n"
                               "7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]\n"
                               "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n");
        REQUIRE(maps.size() == 3);
        CHECK(maps[0].start == 0x55d0c0000000);
        CHECK(maps[0].perms == "r--p");
        CHECK(maps[0].path == "/usr/bin/a b");
        CHECK(maps[1].path == "[stack]");
        CHECK(maps[2].path.empty());
        CHECK_THROWS_AS(parse_maps("nonsense\n"), std::runtime_error);
    }

    TEST_CASE("read_proc_mem reads a fixture's ELF header")
    {
        auto child = child_process::spawn({fixture_path("sleeper"), "0"});
        std::string path = fixture_path("sleeper");
        std::optional<mapping> first;
        REQUIRE(wait_until(
            [&] {
                for (const auto& m : proc_maps(child.pid())) {
                    if (m.path == path && m.offset == 0) {
                        first = m;
                        return true;
                    }
                }
                return false;
            },
            5s));
        auto bytes = read_proc_mem(child.pid(), first->start, 4);
        REQUIRE(bytes.size() == 4);
        CHECK(bytes == std::vector<std::uint8_t>{0x7f, 'E', 'L', 'F'});
        CHECK(read_proc_mem(child.pid(), 0, 16).empty());  // unmapped: short, not an error
        CHECK_THROWS_AS(read_proc_mem(999999999, 0, 1), tdctl::error);
    }

    TEST_CASE("json_lines: one value per non-empty line, a bad line is shown")
    {
        auto values = json_lines("{\"event\":\"TD_CREATE\",\"tid\":12}\n\n[1,2]\n");
        REQUIRE(values.size() == 2);
        CHECK(values[0]["event"] == "TD_CREATE");
        CHECK(values[1].size() == 2);
        CHECK_THROWS_WITH_AS(json_lines("{}\nnot json\n"), doctest::Contains("line 2 is not JSON: 'not json'"),
                             std::runtime_error);
    }

    TEST_CASE("shell_quote quotes only what needs it")
    {
        CHECK(shell_quote({"tdctl", "-p", "12", "--", "a b", "it's"}) == "tdctl -p 12 -- 'a b' 'it'\\''s'");
    }

    TEST_CASE("ptrace availability is probed without failing")
    {
        auto reason = ptrace_unavailable_reason();
        MESSAGE("ptrace: " << (reason ? *reason : std::string("available")));
        CHECK(ptrace_unavailable_reason() == reason);  // cached
    }
}
