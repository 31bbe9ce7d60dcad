// tdctl at a terminal (a pty): signals at the prompt, a terminal that hangs
// up, job control (started with `&`, Ctrl-Z, bg, fg, `stty tostop`), and the
// history file. Each case failed before its fix unless it says otherwise.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"
#include "tests/integration/pty_process.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

constexpr std::string_view prompt = "(tdctl) ";

/// A python3 program that starts and joins a thread every 10 ms and prints
/// "tick N" after each, until killed: while it prints, nothing holds it.
class ticking_target {
public:
    ticking_target() : process_(start())
    {
        REQUIRE(process_.require_line(20s) == "ready");
    }
    pid_t pid() const { return process_.pid(); }

    /// Whether `n` more ticks come within `timeout`: the target runs (each
    /// tick is a thread created and joined, so also through tdctl's stops).
    bool runs(int n, milliseconds timeout)
    {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        for (int i = 0; i < n; ++i) {
            auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0 || !process_.read_line(left))
                return false;
        }
        return true;
    }
    /// Forgets the ticks printed so far.
    void skip_ticks()
    {
        while (process_.read_line(0ms)) {
        }
    }

private:
    static child_process start()
    {
        auto python = find_program("python3");
        REQUIRE_MESSAGE(python.has_value(), "python3 not on PATH (scripts/setup-debian.sh installs it)");
        return child_process::spawn({*python, "-c", R"(import threading, time
print("ready", flush=True)
n = 0
while True:
    t = threading.Thread(target=time.sleep, args=(0.001,))
    t.start(); t.join(); n += 1
    print("tick", n, flush=True); time.sleep(0.01)
)"});
    }
    child_process process_;
};

/// HOME for the test's tdctl (history file, ~/.editrc).
struct temp_home : tdctl::test::temp_directory {
    temp_home() : temp_directory("tdctl-home") {}
};

pty_options test_terminal(const std::string& home)
{
    return pty_options{{{"HOME", home}, {"TERM", "xterm"}, {"EDITRC", ""}}};
}

/// The target is left as if tdctl had never come: not traced, not stopped.
void check_left_clean(pid_t pid)
{
    CHECK(tracer_pid(pid) == 0);
    CHECK_MESSAGE(wait_until([&] { auto s = proc_state(pid); return s && *s != 't' && *s != 'T'; }, 10s),
                  "state " << proc_state(pid).value_or('?'));
}

bool same_modes(const termios& a, const termios& b)
{
    return a.c_iflag == b.c_iflag && a.c_oflag == b.c_oflag && a.c_cflag == b.c_cflag && a.c_lflag == b.c_lflag;
}

}  // namespace

TEST_SUITE("terminal")
{
    // SIGTERM and SIGHUP at the prompt ended tdctl with exit status 0; the
    // README promises 128+N after a clean detach.
    TEST_CASE("SIGTERM and SIGHUP at the prompt: clean detach, exit 128+N, 10 times each")
    {
        require_attach();
        temp_home home;
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        for (int sig : {SIGTERM, SIGHUP}) {
            for (int round = 0; round < 10; ++round) {
                INFO(sigabbrev_np(sig), " round ", round);
                pty_process tdctl({tdctl_path(), "-p", std::to_string(target.pid())}, test_terminal(home.path()));
                REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
                if (round % 2 == 1)
                    tdctl.type("thr");  // a line half typed
                ::kill(tdctl.pid(), sig);
                auto status = tdctl.wait_exit(20s);
                REQUIRE_MESSAGE(status.has_value(), "tdctl still runs:\n", tdctl.tail());
                CHECK_MESSAGE(exit_status::from_wait(*status).exit_code() == 128 + sig,
                              exit_status::from_wait(*status).describe(), "\n", tdctl.tail());
                CHECK_MESSAGE(tdctl.screen().find("detached from process") != std::string::npos, tdctl.tail());
                check_left_clean(target.pid());
            }
        }
        CHECK(!target.wait_exit(0ms).has_value());
    }

    // A closed terminal window: the SIGHUP that comes with it decides the
    // exit status, even though every write to the terminal now fails. (When
    // libedit met the hangup first, tdctl took it for the end of input and
    // exited 2, the status of a failed write: 3 runs in 6.)
    TEST_CASE("the terminal hangs up under the prompt: clean detach, exit 129, 10 times")
    {
        require_attach();
        temp_home home;
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        for (int round = 0; round < 10; ++round) {
            INFO("round ", round);
            pty_process tdctl({tdctl_path(), "-p", std::to_string(target.pid())}, test_terminal(home.path()));
            REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
            tdctl.hang_up();
            auto status = tdctl.wait_exit(20s);
            REQUIRE(status.has_value());
            CHECK_MESSAGE(exit_status::from_wait(*status).exit_code() == 128 + SIGHUP,
                          exit_status::from_wait(*status).describe());
            check_left_clean(target.pid());
        }
    }

    // `detach` at the prompt left tdctl at a prompt where nothing could be
    // done. The prompt now stays and says what it can do (`attach`, `run`:
    // prompt_tests.cpp); `quit` leaves with exit 0.
    TEST_CASE("detach at the prompt: the target is let go, the prompt says what comes next, quit exits 0")
    {
        require_attach();
        temp_home home;
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        pty_process tdctl({tdctl_path(), "-p", std::to_string(target.pid())}, test_terminal(home.path()));
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
        tdctl.type("detach\r");
        REQUIRE_MESSAGE(tdctl.wait_for("detached from process", 20s), tdctl.tail());
        REQUIRE_MESSAGE(tdctl.wait_for("no target now", 10s), tdctl.tail());
        check_left_clean(target.pid());
        tdctl.type("threads\r");
        REQUIRE_MESSAGE(tdctl.wait_for("`attach PID` or `run PROG [ARGS]` starts another session", 10s),
                        tdctl.tail());
        tdctl.type("quit\r");
        auto status = tdctl.wait_exit(20s);
        REQUIRE_MESSAGE(status.has_value(), tdctl.tail());
        CHECK(exit_status::from_wait(*status).is_success());
    }

    // M-x opened libedit's own command line, whose parser dereferences a
    // null pointer on a line such as `'a\ (found by the REPL fuzz test:
    // SIGSEGV). The key now only beeps.
    TEST_CASE("M-x does not open libedit's command line")
    {
        require_attach();
        temp_home home;
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        pty_process tdctl({tdctl_path(), "-p", std::to_string(target.pid())}, test_terminal(home.path()));
        REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
        for (std::string_view keys : {"\x1bx`'a\\\r", "\x1bX`'a\\\r"}) {
            tdctl.type(keys);
            REQUIRE_MESSAGE(tdctl.wait_for("unterminated single quote", 10s), tdctl.tail());
            REQUIRE(tdctl.wait_for(prompt, 10s));
        }
        tdctl.type("quit\r");
        auto status = tdctl.wait_exit(20s);
        REQUIRE(status.has_value());
        CHECK_MESSAGE(exit_status::from_wait(*status).is_success(), exit_status::from_wait(*status).describe());
        check_left_clean(target.pid());
    }

    // Not a regression: the history file kept working across the change of
    // line editing interface, and Tab and Ctrl-C stay harmless.
    TEST_CASE("history: a line of one session comes back with Ctrl-P in the next; Tab and Ctrl-C are harmless")
    {
        require_attach();
        temp_home home;
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        const std::vector<std::string> argv{tdctl_path(), "-p", std::to_string(target.pid())};
        {
            pty_process tdctl(argv, test_terminal(home.path()));
            REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
            // Tab on an empty line lists the commands; after `help quit` it
            // beeps and leaves the line as it is.
            tdctl.type("\thelp quit\t\r");
            REQUIRE_MESSAGE(tdctl.wait_for("Leave tdctl", 10s), tdctl.tail());
            REQUIRE(tdctl.wait_for(prompt, 10s));
            tdctl.type("\t\t\x03");
            REQUIRE_MESSAGE(tdctl.wait_for("^C", 10s), tdctl.tail());
            REQUIRE(tdctl.wait_for(prompt, 10s));
            tdctl.type("quit\r");
            auto status = tdctl.wait_exit(20s);
            REQUIRE(status.has_value());
            CHECK(exit_status::from_wait(*status).is_success());
        }
        auto saved = read_text_file(home.path() + "/.tdctl_history");
        REQUIRE(saved.has_value());
        CHECK_MESSAGE(saved->find("quit") != std::string::npos, *saved);
        {
            pty_process tdctl(argv, test_terminal(home.path()));
            REQUIRE_MESSAGE(tdctl.wait_for(prompt, 20s), tdctl.tail());
            tdctl.type("\x10\x10\r");  // the line before `quit`
            REQUIRE_MESSAGE(tdctl.wait_for("Leave tdctl", 10s), tdctl.tail());
            REQUIRE(tdctl.wait_for(prompt, 10s));
            tdctl.type("quit\r");
            auto status = tdctl.wait_exit(20s);
            REQUIRE(status.has_value());
            CHECK(exit_status::from_wait(*status).is_success());
        }
        check_left_clean(target.pid());
    }

    // `tdctl -p PID &` in an interactive shell: libedit set up the terminal
    // from the background and the terminal stopped tdctl (SIGTTOU) — and with
    // it every thread of the target that reached a clone or exit stop, until
    // `fg`. With `stty tostop` any output did the same.
    TEST_CASE("started in the background (with tostop): no prompt, the target runs, fg brings the prompt")
    {
        require_attach();
        temp_home home;
        ticking_target target;
        pty_process shell({JOB_SHELL, "--tostop", tdctl_path(), "-p", std::to_string(target.pid())},
                          test_terminal(home.path()));
        REQUIRE_MESSAGE(shell.wait_for("attached to process", 20s), shell.tail());
        const termios before = shell.modes();
        REQUIRE_MESSAGE(shell.wait_for("in the background", 20s), shell.tail());
        // What is typed now is the shell's: tdctl must not read it.
        shell.type("hello\n");
        REQUIRE_MESSAGE(shell.wait_for("error hello", 10s), shell.tail());
        target.skip_ticks();
        CHECK_MESSAGE(target.runs(30, 20s), "the target is held while tdctl is in the background:\n", shell.tail());
        shell.drain();
        CHECK_MESSAGE(shell.screen().find("job stopped") == std::string::npos, shell.tail());
        CHECK_MESSAGE(shell.screen().find(prompt) == std::string::npos, shell.tail());
        CHECK_MESSAGE(same_modes(before, shell.modes()), "tdctl changed the terminal's modes from the background");

        shell.type("fg\n");
        REQUIRE_MESSAGE(shell.wait_for("job foreground", 10s), shell.tail());
        REQUIRE_MESSAGE(shell.wait_for(prompt, 10s), "no prompt after fg:\n", shell.tail());
        shell.type("threads\r");
        REQUIRE_MESSAGE(shell.wait_for("TRACEME", 10s), shell.tail());
        REQUIRE(shell.wait_for(prompt, 10s));
        shell.type("quit\r");
        REQUIRE_MESSAGE(shell.wait_for("job exited 0", 20s), shell.tail());
        check_left_clean(target.pid());
        CHECK(target.runs(5, 20s));
    }

    // Ctrl-Z at the prompt, then `bg`: tdctl goes on in the background
    // without reading the terminal or drawing its prompt there, and `fg`
    // gives the prompt back with the half-typed line.
    TEST_CASE("Ctrl-Z, bg, fg at the prompt: the target runs in the background, the line comes back")
    {
        require_attach();
        temp_home home;
        ticking_target target;
        pty_process shell({JOB_SHELL, tdctl_path(), "-p", std::to_string(target.pid())},
                          test_terminal(home.path()));
        REQUIRE_MESSAGE(shell.wait_for("attached to process", 20s), shell.tail());
        target.skip_ticks();
        CHECK_MESSAGE(target.runs(30, 20s), "the target is held while tdctl is in the background:\n", shell.tail());
        REQUIRE_MESSAGE(shell.wait_for("in the background", 20s), shell.tail());
        shell.type("fg\n");
        REQUIRE_MESSAGE(shell.wait_for(prompt, 10s), shell.tail());
        // The terminal is set up for editing before the prompt shows: keys
        // typed at once are libedit's, not the terminal's line editing.
        // (The prompt came first: a Ctrl-Z, then `bg`, in between let tdctl
        // set the shell's terminal to raw mode from the background.)
        CHECK((shell.modes().c_lflag & ICANON) == 0);
        shell.type("thr");
        REQUIRE(shell.wait_for("thr", 10s));
        shell.type("\x1a");
        REQUIRE_MESSAGE(shell.wait_for("job stopped", 10s), shell.tail());
        shell.type("bg\n");
        REQUIRE_MESSAGE(shell.wait_for("job continued", 10s), shell.tail());
        target.skip_ticks();
        CHECK_MESSAGE(target.runs(30, 20s), "the target is held while tdctl is in the background:\n", shell.tail());
        // The terminal is the shell's again, in the shell's modes.
        CHECK((shell.modes().c_lflag & ICANON) != 0);
        // What is typed now is the shell's; tdctl must leave it there.
        shell.type("hello\n");
        REQUIRE_MESSAGE(shell.wait_for("error hello", 10s), shell.tail());
        shell.type("fg\n");
        REQUIRE_MESSAGE(shell.wait_for("job foreground", 10s), shell.tail());
        REQUIRE_MESSAGE(shell.wait_for(std::string(prompt) + "thr", 10s), "no prompt after fg:\n", shell.tail());
        CHECK((shell.modes().c_lflag & ICANON) == 0);
        shell.type("eads\r");
        REQUIRE_MESSAGE(shell.wait_for("TRACEME", 10s), shell.tail());
        REQUIRE(shell.wait_for(prompt, 10s));
        shell.type("quit\r");
        REQUIRE_MESSAGE(shell.wait_for("job exited 0", 20s), shell.tail());
        check_left_clean(target.pid());
    }

    // With --batch, commands are read from a terminal on stdin, but only in
    // the foreground: a read from the background stopped tdctl (SIGTTIN).
    TEST_CASE("--batch reading a terminal from the background: the target runs, commands come after fg")
    {
        require_attach();
        temp_home home;
        ticking_target target;
        pty_process shell({JOB_SHELL, tdctl_path(), "--batch", "-p", std::to_string(target.pid())},
                          test_terminal(home.path()));
        REQUIRE_MESSAGE(shell.wait_for("attached to process", 20s), shell.tail());
        // What is typed now is the shell's: tdctl must not read it.
        shell.type("hello\n");
        REQUIRE_MESSAGE(shell.wait_for("error hello", 10s), shell.tail());
        target.skip_ticks();
        CHECK_MESSAGE(target.runs(30, 20s), "the target is held while tdctl is in the background:\n", shell.tail());
        shell.drain();
        CHECK_MESSAGE(shell.screen().find("job stopped") == std::string::npos, shell.tail());
        shell.type("fg\n");
        REQUIRE_MESSAGE(shell.wait_for("job foreground", 10s), shell.tail());
        shell.type("threads\n");
        REQUIRE_MESSAGE(shell.wait_for("TRACEME", 10s), shell.tail());
        shell.type("quit\n");
        REQUIRE_MESSAGE(shell.wait_for("job exited 0", 20s), shell.tail());
        check_left_clean(target.pid());
    }
}
