// The prompt as a user types at it, on a pty (issue 12): Tab completes
// commands, subcommands and TIDs; `attach PID` and `run PROG` after a
// `detach` or the target's exit; one Ctrl-C in `sleep` gives one fresh
// prompt; a failed -e line names what it leaves unrun, as without a terminal;
// `quit` after a Ctrl-C exits 0.
// Each case failed before its fix.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"
#include "tests/integration/pty_process.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

constexpr std::string_view prompt = "(tdctl) ";

/// HOME for the test's tdctl (history file, ~/.editrc).
struct temp_home : tdctl::test::temp_directory {
    temp_home() : temp_directory("tdctl-prompt") {}
};

pty_options test_terminal(const temp_home& home)
{
    return pty_options{{{"HOME", home.path()}, {"TERM", "xterm"}, {"EDITRC", ""}}};
}

/// A sleeper fixture with `workers` threads, running once they all exist.
child_process start_sleeper(int workers)
{
    auto target = child_process::spawn({fixture_path("sleeper"), std::to_string(workers)});
    REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == static_cast<std::size_t>(workers) + 1; },
                       10s));
    return target;
}

/// `quit`, then tdctl's exit status, which must be 0.
void quit_cleanly(pty_process& tdctl)
{
    REQUIRE(tdctl.type("quit\r"));
    auto status = tdctl.wait_exit(20s);
    REQUIRE_MESSAGE(status.has_value(), tdctl.tail());
    CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 0), tdctl.tail());
}

std::size_t count_of(std::string_view text, std::string_view part)
{
    std::size_t n = 0;
    for (auto at = text.find(part); at != std::string_view::npos; at = text.find(part, at + part.size()))
        ++n;
    return n;
}

}  // namespace

TEST_SUITE("prompt")
{
    // Tab completed file names: `wat` became nothing a command knows.
    TEST_CASE("Tab completes a command, a subcommand and a TID prefix")
    {
        require_attach();
        temp_home home;
        auto target = start_sleeper(0);   // one thread: any prefix of its TID is unique
        const std::string pid = std::to_string(target.pid());
        pty_process tdctl({tdctl_path(), "-p", pid}, test_terminal(home));
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());

        // libedit redraws only what changed, so the screen need not hold the
        // whole word: what ran tells what Tab made of the line.
        REQUIRE(tdctl.type("wat\t--for 0.2\r"));
        REQUIRE_MESSAGE(tdctl.wait_for("watch: 0 messages (duration)", 10s), tdctl.tail());
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 10s), tdctl.tail());

        REQUIRE(tdctl.type("event s\tcreate\r"));
        REQUIRE_MESSAGE(tdctl.wait_for("global event mask: create", 10s), tdctl.tail());
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 10s), tdctl.tail());

        // The TID's first digit, then Tab: the whole TID, and `lwpinfo` answers for it.
        REQUIRE(tdctl.type("lwpinfo " + pid.substr(0, 1) + "\t\r"));
        REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("{:>7}  sleeper", pid), 10s), tdctl.tail());
        quit_cleanly(tdctl);
        CHECK(tracer_pid(target.pid()) == 0);
    }

    // After `detach` the prompt stayed and every command failed, with no way
    // to attach again.
    TEST_CASE("attach PID after detach, then run PROG after the target's exit")
    {
        require_attach();
        temp_home home;
        auto first = start_sleeper(1);
        auto second = start_sleeper(2);
        pty_process tdctl({tdctl_path(), "-p", std::to_string(first.pid())}, test_terminal(home));
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
        REQUIRE(tdctl.type("detach\r"));
        REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("detached from process {}", first.pid()), 10s), tdctl.tail());
        REQUIRE_MESSAGE(tdctl.wait_for("`attach PID` or `run PROG [ARGS]`", 10s), tdctl.tail());
        CHECK(wait_until([&] { return tracer_pid(first.pid()) == 0; }, 5s));

        REQUIRE(tdctl.type(fmt::format("attach {}\r", second.pid())));
        REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("attached to process {}", second.pid()), 20s), tdctl.tail());
        REQUIRE(tdctl.type("threads\r"));
        REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("process {} (sleeper): 3 threads", second.pid()), 10s),
                        tdctl.tail());
        CHECK(tracer_pid(second.pid()) != 0);
        REQUIRE(tdctl.type("kill\r"));
        REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("process {} killed by SIGKILL", second.pid()), 10s), tdctl.tail());

        REQUIRE(tdctl.type(fmt::format("run {} 1 1\r", fixture_path("churn"))));
        REQUIRE_MESSAGE(tdctl.wait_for("launched process ", 20s), tdctl.tail());
        REQUIRE(tdctl.type("watch\r"));
        REQUIRE_MESSAGE(tdctl.wait_for("exited with status 0", 20s), tdctl.tail());
        REQUIRE_MESSAGE(tdctl.wait_for("watch: 4 messages (exit)", 10s), tdctl.tail());
        quit_cleanly(tdctl);
        CHECK(tracer_pid(first.pid()) == 0);
    }

    // One Ctrl-C in `sleep` at the prompt showed "^C(tdctl) ^C": two
    // interrupts, the second dropping a line nobody typed.
    TEST_CASE("one Ctrl-C in sleep: the sleep ends and one fresh prompt comes")
    {
        require_attach();
        temp_home home;
        auto target = start_sleeper(1);
        pty_process tdctl({tdctl_path(), "-p", std::to_string(target.pid())}, test_terminal(home));
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
        REQUIRE(tdctl.type("sleep 30\r"));
        std::this_thread::sleep_for(500ms);
        const std::size_t from = tdctl.screen().size();
        REQUIRE(tdctl.type("\x03"));
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 10s), tdctl.tail());
        std::this_thread::sleep_for(700ms);
        tdctl.drain();
        const std::string after = tdctl.screen().substr(from);
        INFO("after Ctrl-C: ", escape_bytes(after));
        CHECK(count_of(after, "^C") <= 1);
        CHECK(count_of(after, prompt) == 1);
        // The prompt takes a command at once.
        REQUIRE(tdctl.type("threads\r"));
        REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("process {} (sleeper)", target.pid()), 10s), tdctl.tail());
        quit_cleanly(tdctl);
    }

    // On a terminal `-e bogus -e lwpinfo` ran `lwpinfo` after the failure;
    // without one it stopped at `bogus`. Now both run it, as gdb -batch
    // runs the -ex commands after one that failed.
    TEST_CASE("-e bogus -e lwpinfo on a terminal: the error, lwpinfo's rows, then the prompt")
    {
        require_attach();
        temp_home home;
        auto target = start_sleeper(1);
        pty_process tdctl({tdctl_path(), "-p", std::to_string(target.pid()), "-e", "bogus", "-e", "lwpinfo"},
                          test_terminal(home));
        REQUIRE_MESSAGE(tdctl.wait_for("-e 1: unknown command 'bogus'", 20s), tdctl.tail());
        REQUIRE_MESSAGE(tdctl.wait_for("lwp_utime", 20s), tdctl.tail());
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 10s), tdctl.tail());
        CHECK(tdctl.screen().find("not run") == std::string::npos);
        quit_cleanly(tdctl);
        CHECK(tracer_pid(target.pid()) == 0);
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

    // A launched program is in tdctl's process group, so the terminal's
    // Ctrl-C reached it too: meant to end `watch` at the prompt, it killed
    // the program ("process N killed by SIGINT"). Under a prompt (-i, or
    // `run` typed at it) the terminal's interrupt is tdctl's, as under gdb;
    // a SIGINT sent with kill(2) still reaches the program.
    TEST_CASE("launched under the prompt: Ctrl-C ends watch and the program lives; kill -INT still reaches it")
    {
        require_ptrace();
        temp_home home;
        pty_process tdctl({tdctl_path(), "-i", "--", fixture_path("sleeper"), "2"}, test_terminal(home));
        auto interrupt_watch = [&](const std::string& what) {
            INFO(what);
            const std::string launched = "launched process ";
            REQUIRE_MESSAGE(tdctl.wait_for(launched, 20s), tdctl.tail());
            REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
            const std::string& screen = tdctl.screen();
            pid_t pid = static_cast<pid_t>(std::strtol(screen.c_str() + screen.rfind(launched) + launched.size(),
                                                       nullptr, 10));
            REQUIRE(pid > 0);
            REQUIRE(tdctl.type("watch\r"));
            std::this_thread::sleep_for(500ms);
            const std::size_t from = tdctl.screen().size();
            REQUIRE(tdctl.type("\x03"));
            REQUIRE_MESSAGE(tdctl.wait_for(prompt, 10s), tdctl.tail());
            REQUIRE(tdctl.type("threads\r"));
            REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("process {} (sleeper)", pid), 10s), tdctl.tail());
            CHECK_MESSAGE(tdctl.screen().find("killed by SIGINT", from) == std::string::npos, tdctl.tail());
            CHECK(::kill(pid, 0) == 0);
            return pid;
        };
        pid_t first = interrupt_watch("-i -- sleeper 2");
        REQUIRE(::kill(first, SIGINT) == 0);
        REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("process {} killed by SIGINT", first), 10s), tdctl.tail());

        REQUIRE(tdctl.type(fmt::format("run {} 1\r", fixture_path("sleeper"))));
        pid_t second = interrupt_watch("run sleeper 1");
        REQUIRE(tdctl.type("kill\r"));
        REQUIRE_MESSAGE(tdctl.wait_for(fmt::format("process {} killed by SIGKILL", second), 10s), tdctl.tail());
        REQUIRE(tdctl.type("quit\r"));
        auto status = tdctl.wait_exit(20s);
        REQUIRE_MESSAGE(status.has_value(), tdctl.tail());
        // The last program's status (killed by SIGKILL: 128 + 9).
        CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 128 + SIGKILL), tdctl.tail());
    }
}
