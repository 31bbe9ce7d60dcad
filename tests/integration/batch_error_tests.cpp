// Errors in a batch (commands on stdin, -e, -x, --batch) as gdb -batch
// treats its -ex commands: the failed command prints its error record, the
// commands after it run, and tdctl exits 2 at the end. Each case failed
// before its fix: the first mistyped line ended the session, a bad word was
// echoed whole however long, `-p ''` was "nothing to do", and `detach` then
// `quit` said "1 command not run". Also: an unknown command or a file of
// garbage named by where it came from (-e N, FILE:LINE).
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

/// The index of the first record of `type` in `records`, or -1.
long first_of(const std::vector<json>& records, std::string_view type)
{
    for (std::size_t i = 0; i < records.size(); ++i)
        if (records[i].value("type", "") == type)
            return static_cast<long>(i);
    return -1;
}

/// The "message" of every error record.
std::vector<std::string> error_messages(const tdctl_run& run)
{
    std::vector<std::string> out;
    for (const auto& r : run.of_type("error"))
        out.push_back(r.value("message", ""));
    return out;
}

}  // namespace

TEST_SUITE("batch errors")
{
    TEST_CASE("stdin: a mistyped line is an error record, the lines after it run, exit 2")
    {
        require_attach();
        sleeper_target t;
        for (bool batch : {false, true}) {
            INFO("--batch: ", batch);
            std::vector<std::string> args{"--json"};
            if (batch)
                args.push_back("--batch");
            args.insert(args.end(), {"-p", t.pid_text()});
            run_options input;
            input.stdin_text = "frob\nthreads\n";
            auto run = run_tdctl(args, 30s, input);
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 2);
            const auto errors = error_messages(run);
            REQUIRE(errors.size() == 1);
            CHECK(errors[0].starts_with("stdin:1: unknown command 'frob'"));
            // `threads` ran after the error: its rows, one per thread, come after it.
            CHECK(run.of_type("thread").size() == 2);
            CHECK(first_of(run.records, "error") < first_of(run.records, "thread"));
            CHECK(run.of_type("detached").size() == 1);
            CHECK_FALSE(contains(run.result.err, "not run"));
            CHECK(tracer_pid(t.pid()) == 0);
        }
    }

    TEST_CASE("-e: two failed commands among three, the third runs, exit 2 at the end")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"--batch", "-p", t.pid_text(), "-e", "bogus", "-e", "watch --count x", "-e", "lwpinfo"},
                             30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, "-e 1: unknown command 'bogus'"));
        CHECK(contains(run.result.err, "-e 2: bad count 'x'"));
        CHECK(contains(run.result.out, "lwp_utime"));
        CHECK_FALSE(contains(run.result.out, "not run"));
        CHECK(tracer_pid(t.pid()) == 0);
    }

    TEST_CASE("a failure is not hidden by the last command's status: exit 2, not 1")
    {
        require_attach();
        sleeper_target t;
        // `event getmsg` finds no message: alone it exits 1.
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "frob", "-e", "event getmsg"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.out, "TD_NOMSG"));
    }

    TEST_CASE("-x FILE: a mistyped line does not end the file")
    {
        require_attach();
        sleeper_target t;
        temp_file script("batch-script");
        {
            std::ofstream out(script.path());
            out << "frob\nthreads\n# a comment\nlwpinfo\n";
        }
        auto run = run_tdctl({"--json", "-p", t.pid_text(), "-x", script.path()}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        const auto errors = error_messages(run);
        REQUIRE(errors.size() == 1);
        CHECK(errors[0].starts_with(script.path() + ":1: unknown command 'frob'"));
        CHECK(run.of_type("thread").size() == 2);
        CHECK(run.of_type("lwpinfo").size() == 2);
        CHECK(tracer_pid(t.pid()) == 0);
    }

    TEST_CASE("a 10 kB word is quoted by its first 80 bytes and its length, never whole")
    {
        require_attach();
        sleeper_target t;
        const std::string word(10240, 'w');
        const std::string start = std::string(70, 'w');
        for (const std::string& line :
             {word, "sleep " + word, "top --sort " + word, "event set " + word, "event enable " + word, "help " + word,
              "bt " + word, "stats " + word, "rusage " + word, "watch --for " + word, "attach " + word}) {
            INFO("line: ", line.substr(0, 20), "...");
            auto run = run_tdctl({"-p", t.pid_text(), "-e", line}, 30s);
            INFO(run.describe());
            CHECK(run.result.status.exit_code() == 2);
            CHECK(contains(run.result.err, start + "..."));
            CHECK(contains(run.result.err, " bytes)"));
            CHECK(run.result.err.size() < 1000);
        }
        // On stdin too.
        run_options input;
        input.stdin_text = "frob" + word + "\nthreads\n";
        auto run = run_tdctl({"-p", t.pid_text()}, 30s, input);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(run.result.err.size() < 1000);
        CHECK(contains(run.result.err, "stdin:1: unknown command 'frob" + std::string(76, 'w') + "...' (10244 bytes)"));
        // In the note that names a command left unrun.
        auto unrun = run_tdctl({"-p", t.pid_text(), "-e", "detach", "-e", "threads " + word}, 30s);
        INFO(unrun.describe());
        CHECK(unrun.result.status.exit_code() == 0);
        CHECK(contains(unrun.result.out,
                       "1 command not run, from `threads " + std::string(72, 'w') + "... (10248 bytes)` (-e 2)"));
        CHECK(unrun.result.out.size() < 1000);
        CHECK(tracer_pid(t.pid()) == 0);
        // tdctl's own options as well.
        for (const auto& args : std::vector<std::vector<std::string>>{
                 {"-p", word}, {"--" + word}, {"-p", t.pid_text(), "--trace", "/dev/null", "--trace-format", word}}) {
            auto usage = run_tdctl(args, 30s);
            INFO(usage.describe());
            CHECK(usage.result.status.exit_code() == 64);
            CHECK(contains(usage.result.err, start + "..."));
            CHECK(usage.result.err.size() < 400);
        }
        // A program that cannot run, named in the failed exec's message.
        auto launch = run_tdctl({"--", "/" + word}, 30s);
        INFO(launch.describe());
        CHECK(launch.result.status.exit_code() == 2);
        CHECK(contains(launch.result.err, start + "..."));
        CHECK(launch.result.err.size() < 400);
    }

    TEST_CASE("-p '' is not a process ID")
    {
        auto run = run_tdctl({"-p", ""}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 64);
        CHECK(contains(run.result.err, "-p: not a process ID: ''"));
    }

    TEST_CASE("`detach` then `quit`: no command is named as not run; exit 0")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "detach", "-e", "quit"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        CHECK(contains(run.result.out, "detached from process"));
        CHECK_FALSE(contains(run.result.out + run.result.err, "not run"));

        run_options input;
        input.stdin_text = "detach\nquit\n";
        auto piped = run_tdctl({"-p", t.pid_text()}, 30s, input);
        INFO(piped.describe());
        CHECK(piped.result.status.exit_code() == 0);
        CHECK_FALSE(contains(piped.result.out + piped.result.err, "not run"));

        // A command before the `quit` is still named; what follows the `quit` would not have run.
        auto between = run_tdctl({"-p", t.pid_text(), "-e", "detach", "-e", "threads", "-e", "quit", "-e", "lwpinfo"},
                                 30s);
        INFO(between.describe());
        CHECK(between.result.status.exit_code() == 0);
        CHECK(contains(between.result.out, "detached from the target; 1 command not run, from `threads` (-e 2)"));
        CHECK(tracer_pid(t.pid()) == 0);
    }

    TEST_CASE("an unknown command: exit 2, the message names -e 1 and the word, the target is detached")
    {
        require_attach();
        sleeper_target t;
        auto run = run_tdctl({"-p", t.pid_text(), "-e", "bogus", "-e", "threads"}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, "-e 1"));
        CHECK(contains(run.result.err, "bogus"));
        // The command after the failing one runs, as gdb -batch's -ex do.
        CHECK(contains(run.result.out, "TRACEME"));
        CHECK(contains(run.result.out, "detached"));
        CHECK(tracer_pid(t.pid()) == 0);
        // Back in pause() (just after the detach it may still be on its way
        // there, 'R', on a loaded machine).
        CHECK_MESSAGE(wait_until([&] { return proc_state(t.pid()) == 'S'; }, 5s),
                      "state " << proc_state(t.pid()).value_or('?'));
    }

    TEST_CASE("a command file with garbage: exit 2 naming the file and line")
    {
        require_attach();
        sleeper_target t;
        temp_file script("garbage-script");
        std::ofstream(script.path(), std::ios::binary) << "threads\n\x01\x02\xff((garbage\"\nthreads\n";
        auto run = run_tdctl({"-p", t.pid_text(), "-x", script.path()}, 30s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        CHECK(contains(run.result.err, script.path() + ":2"));
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
