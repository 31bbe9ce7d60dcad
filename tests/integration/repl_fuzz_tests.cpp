// The interactive prompt survives any line: random command lines typed on a
// pseudo-terminal into tdctl attached to a live target — commands with random
// arguments, garbage words, lines of 1-10 KB, binary bytes, control
// characters, escape sequences — never crash it or leave it unresponsive,
// and the target ends alive and untraced.
//
// With libedit's readline-compatible callback interface (rl_callback_*), the
// prompt's first implementation, every run aborted within its first 20 lines
// with `malloc(): invalid next size (unsorted)`.
//
// TDCTL_FUZZ_SEED and TDCTL_FUZZ_LINES replay or lengthen a run; the seed of
// every run is printed.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>

#include <fmt/format.h>

#include "cmd/command_line.hpp"
#include "tests/integration/integration_support.hpp"
#include "tests/integration/pty_process.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

constexpr std::string_view prompt = "(tdctl) ";

/// A python3 program that starts and joins a thread every 20 ms until it is
/// killed: clone and exit stops for tdctl to service while the user types.
child_process start_endless_trickle()
{
    auto python = find_program("python3");
    REQUIRE_MESSAGE(python.has_value(), "python3 not on PATH (scripts/setup-debian.sh installs it)");
    const std::string code = R"(import threading, time
print("ready", flush=True)
while True:
    t = threading.Thread(target=time.sleep, args=(0.001,))
    t.start(); t.join(); time.sleep(0.02)
)";
    auto target = child_process::spawn({*python, "-c", code});
    REQUIRE(target.require_line(20s) == "ready");
    return target;
}

/// HOME for the test's tdctl (history file, ~/.editrc).
struct temp_home : tdctl::test::temp_directory {
    temp_home() : temp_directory("tdctl-home") {}
};

/// Bytes a random line never holds: Ctrl-D (end of input at an empty line),
/// Ctrl-Z and Ctrl-\ (the terminal stops or quits the foreground job),
/// Ctrl-S and Ctrl-Q (output flow control: tdctl's writes would wait for
/// Ctrl-Q), and CR/LF, which would end the line early (`watch --for 0.01` cut
/// after `watch` runs until Ctrl-C).
bool is_excluded(unsigned char c)
{
    return c == 0x04 || c == 0x1a || c == 0x1c || c == 0x13 || c == 0x11 || c == '\r' || c == '\n';
}

/// Words that end the session when they come first on a line. Control keys
/// edit the line rather than go into it, and bytes that are not characters
/// are dropped, so they are left out first (roughly: keys that move the
/// cursor can still reorder what remains).
bool ends_session(const std::string& keys)
{
    std::string line;
    for (unsigned char c : keys)
        if (c >= 0x20 && c < 0x7f)
            line += static_cast<char>(c);
    auto words = tdctl::cmd::split_words(line);
    if (!words || words->empty())
        return false;
    const std::string& w = words->front();
    return w == "quit" || w == "q" || w == "exit" || w == "detach" || w == "kill";
}

class line_maker {
public:
    line_maker(std::uint64_t seed, std::vector<pid_t> tids) : rng_(seed), tids_(std::move(tids)) {}

    struct line {
        std::string keys;
        std::string kind;
    };

    line next()
    {
        for (;;) {
            line l = make();
            // Lines are always closed by a blank, which completes any key
            // sequence left open (ESC, Ctrl-V, Ctrl-X, ESC [) so that the
            // Enter after it ends the line.
            if (l.keys.find("sync-") == std::string::npos && l.keys.find(prompt) == std::string::npos &&
                !ends_session(l.keys))
                return l;
        }
    }

private:
    int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
    bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
    template <typename T>
    const T& one_of(const std::vector<T>& v) { return v[static_cast<std::size_t>(pick(static_cast<int>(v.size())))]; }

    unsigned char any_byte()
    {
        for (;;) {
            auto c = static_cast<unsigned char>(pick(256));
            if (!is_excluded(c))
                return c;
        }
    }
    char printable() { return static_cast<char>(0x20 + pick(0x5f)); }

    std::string word(int max_len = 12)
    {
        std::string w;
        int n = 1 + pick(max_len);
        for (int i = 0; i < n; ++i)
            w += printable();
        return w;
    }

    std::string events_arg()
    {
        static const std::vector<std::string> names{"create", "death", "TD_CREATE", "td_death", "all", "create,death",
                                                    "sleep", "lock_try", "TD_NOEVENT", "ready,", ",", "CREATE,bogus"};
        return chance(0.8) ? one_of(names) : word();
    }

    std::string tid_arg()
    {
        switch (pick(6)) {
        case 0:
        case 1: return std::to_string(one_of(tids_));
        case 2: return "all";
        case 3: return std::to_string(pick(1 << 22));
        case 4: return one_of(std::vector<std::string>{"0", "-1", "4294967296", "99999999999999999999", "0x10"});
        default: return word(6);
        }
    }

    std::string short_duration()
    {
        return one_of(std::vector<std::string>{"0.01", "0.02", "0.05", "10ms", "20ms", "0.03s"});
    }

    /// A command that returns at once (it may hold or resume the target).
    std::string command()
    {
        switch (pick(14)) {
        case 0: return "threads";
        case 1: return "event addr " + events_arg();
        case 2: return "event set " + events_arg() + (chance(0.4) ? " " + tid_arg() : "");
        case 3: return "event clear " + events_arg() + (chance(0.4) ? " " + tid_arg() : "");
        case 4: return "event enable " + one_of(std::vector<std::string>{"on", "off", "1", "0", "maybe"}) +
                       (chance(0.6) ? " " + tid_arg() : "");
        case 5: return "event getmsg" + (chance(0.4) ? " " + tid_arg() : std::string());
        case 6: return "stats " + one_of(std::vector<std::string>{"enable", "disable", "reset", "show", "bogus"});
        case 7: return "rusage " + one_of(std::vector<std::string>{"start", "stop", "collect"}) +
                       (chance(0.5) ? " " + tid_arg() : "");
        case 8: return "lwpinfo" + (chance(0.6) ? " " + tid_arg() : std::string());
        case 9: return "bt" + (chance(0.5) ? " " + tid_arg() : std::string());
        case 10: return "help" + (chance(0.7) ? " " + one_of(std::vector<std::string>{"event", "watch", "stats", "bt",
                                                                                       "quit", "nothing", "help"})
                                               : std::string());
        case 11: return "continue";
        case 12: return "interrupt";
        default: return "event " + one_of(std::vector<std::string>{"", "bogus", "addr", "set", "enable on"});
        }
    }

    /// A command that lets the target run, always with a short bound.
    std::string running_command()
    {
        switch (pick(5)) {
        case 0: return "sleep " + short_duration();
        case 1: return "watch " + (chance(0.5) ? one_of(std::vector<std::string>{"create", "death", "all"}) + " "
                                               : std::string()) +
                       "--for " + short_duration() + (chance(0.3) ? " --count " + std::to_string(1 + pick(5)) : "");
        case 2: return "stop " + one_of(std::vector<std::string>{"create", "death", "create,death"}) + " --for " +
                       short_duration();
        case 3: return "stats watch --interval " + short_duration() + " --count " + std::to_string(1 + pick(3));
        default: return "rusage collect all --interval " + short_duration() + " --count " + std::to_string(1 + pick(2));
        }
    }

    std::string garbage()
    {
        std::string s;
        int n = 1 + pick(10);
        for (int i = 0; i < n; ++i)
            s += (i ? " " : "") + word();
        return s;
    }

    std::string binary()
    {
        std::string s;
        int n = 1 + pick(200);
        for (int i = 0; i < n; ++i)
            s += static_cast<char>(chance(0.6) ? 0x80 + pick(0x80) : any_byte());
        return s;
    }

    std::string controls()
    {
        std::string s = chance(0.5) ? command() : word();
        int n = 1 + pick(20);
        for (int i = 0; i < n; ++i) {
            auto c = static_cast<unsigned char>(pick(0x21));
            if (c == 0x20)
                c = 0x7f;  // DEL, the other control key
            if (is_excluded(c))
                continue;
            s.insert(static_cast<std::size_t>(pick(static_cast<int>(s.size()) + 1)), 1, static_cast<char>(c));
            if (chance(0.3))
                s += printable();
        }
        return s;
    }

    std::string escapes()
    {
        static const std::vector<std::string> keys{
            "\x1b[A", "\x1b[B", "\x1b[C", "\x1b[D", "\x1bOA", "\x1bOD", "\x1b[H", "\x1b[F", "\x1b[3~", "\x1b[2~",
            "\x1b[5~", "\x1b[1;5C", "\x1b" "b", "\x1b" "f", "\x1b" "d", "\x1b\x7f", "\x1b" "u", "\x1b" "l",
            "\x1b" "c", "\x1b" ".", "\x1b" "_", "\x1b" "p", "\x1b" "n", "\x1b" "w", "\x1b" "y", "\x1b" "x",
            "\x1b[", "\x1b[9", "\x1b\x1b", "\x18\x18", "\x18", "\x16", "\x01", "\x05", "\x02", "\x06", "\x0b",
            "\x15", "\x17", "\x19", "\x14", "\x0c", "\x12", "\x10", "\x0e", "\x08", "\x7f", "\x09", "\x00",
            "\x1b" "2" "\x1b" "0", "\x1b" "9" "\x1b" "9"};
        std::string s = chance(0.5) ? command() : word();
        int n = 1 + pick(8);
        for (int i = 0; i < n; ++i) {
            const std::string& k = one_of(keys);
            s += k;
            if (chance(0.5))
                s += word(4);
        }
        return s;
    }

    std::string long_line()
    {
        const std::size_t size = 1024 + static_cast<std::size_t>(pick(9 * 1024 + 1));
        std::string s;
        switch (pick(5)) {
        case 0:  // one huge word
            while (s.size() < size)
                s += printable();
            break;
        case 1:  // a real command with a huge argument
            s = one_of(std::vector<std::string>{"help ", "event set ", "event addr ", "bt ", "lwpinfo ", "threads ",
                                                 "rusage collect "});
            while (s.size() < size)
                s += chance(0.5) ? std::string("create,") : std::string(1, printable());
            break;
        case 2:  // words
            while (s.size() < size)
                s += word() + " ";
            break;
        case 3:  // bytes of every kind
            while (s.size() < size)
                s += static_cast<char>(any_byte());
            break;
        default:  // quotes and escapes
            while (s.size() < size)
                s += one_of(std::vector<std::string>{"\"", "'", "\\", "#", " ", "a", "\\\"", "''"});
            break;
        }
        return s;
    }

    std::string mutated()
    {
        std::string s = command();
        int n = 1 + pick(4);
        for (int i = 0; i < n; ++i) {
            auto at = static_cast<std::size_t>(pick(static_cast<int>(s.size()) + 1));
            switch (pick(4)) {
            case 0: s.insert(at, 1, static_cast<char>(any_byte())); break;
            case 1:
                if (at < s.size())
                    s.erase(at, 1);
                break;
            case 2:
                if (at < s.size())
                    s[at] = static_cast<char>(any_byte());
                break;
            default: s.insert(at, s.substr(0, static_cast<std::size_t>(pick(static_cast<int>(s.size()) + 1))));
            }
        }
        return s;
    }

    line make()
    {
        int r = pick(100);
        if (r < 25)
            return {command(), "command"};
        if (r < 35)
            return {running_command(), "running"};
        if (r < 45)
            return {mutated(), "mutated"};
        if (r < 55)
            return {garbage(), "garbage"};
        if (r < 65)
            return {binary(), "binary"};
        if (r < 75)
            return {controls(), "control"};
        if (r < 85)
            return {escapes(), "escape"};
        return {long_line(), "long"};
    }

    std::mt19937_64 rng_;
    std::vector<pid_t> tids_;
};

std::uint64_t env_number(const char* name, std::uint64_t fallback)
{
    const char* v = std::getenv(name);
    return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

std::string describe_status(int raw)
{
    return exit_status::from_wait(raw).describe();
}

}  // namespace

TEST_SUITE("repl fuzz")
{
    TEST_CASE("random lines at the prompt: no crash, no hang, the target ends alive and untraced")
    {
        require_attach();
        const std::uint64_t seed = env_number("TDCTL_FUZZ_SEED", std::random_device{}());
        const std::uint64_t lines = env_number("TDCTL_FUZZ_LINES", 2400);
        // Several sessions, each ended by `quit`: libedit starts afresh in
        // each (its buffers grow from their first size again), and every
        // detach must leave the target clean. The terminal types vary.
        const std::vector<std::string> terminals{"xterm", "vt100", "dumb", "xterm", "xterm", "vt100"};
        MESSAGE("seed ", seed, " (TDCTL_FUZZ_SEED replays it), ", lines, " lines in ", terminals.size(), " sessions");

        auto target = start_endless_trickle();
        pid_t pid = target.pid();
        temp_home home;
        std::size_t session_no = 0;
        auto start_tdctl = [&] {
            const std::string& term = terminals[session_no % terminals.size()];
            const pty_options options{{{"HOME", home.path()}, {"TERM", term}, {"EDITRC", ""}}};
            auto p = std::make_unique<pty_process>(std::vector<std::string>{tdctl_path(), "-p", std::to_string(pid)},
                                                   options);
            REQUIRE_MESSAGE(p->wait_for(prompt, 30s), "no prompt (TERM=", term, "):\n", p->tail());
            return p;
        };
        auto tdctl = start_tdctl();
        line_maker maker(seed, task_tids(pid));

        std::map<std::string, int> kinds;
        std::map<std::string, double> seconds_by_kind;
        std::size_t bytes = 0;
        int recoveries = 0, restarts = 0, kills = 0;
        std::uint64_t typed = 0;
        std::vector<std::string> recent;  // the last lines typed, for a failure message
        const auto started = std::chrono::steady_clock::now();

        // After each line, an unknown command with a number: its error message
        // then the prompt after it mean every line before it has been run.
        int sync_no = 0;
        auto sync = [&](milliseconds timeout) {
            const std::string word = fmt::format("sync-{}", ++sync_no);
            if (!tdctl->type(word + "\r", timeout))
                return false;
            return tdctl->wait_for("'" + word + "'", timeout) && tdctl->wait_for(prompt, timeout);
        };
        auto failure = [&](const std::string& what) {
            std::string history;
            for (const auto& l : recent)
                history += escape_bytes(l.substr(0, 300)) +
                           (l.size() > 300 ? fmt::format("... ({} bytes)", l.size()) : std::string()) + "\n";
            return fmt::format("{} (seed {}, line {}, session {})\nlast lines typed:\n{}\nscreen:\n{}", what, seed,
                               typed, session_no + 1, history, tdctl->tail(3000));
        };
        // `quit`, then a clean exit with the target detached and left running.
        auto end_session = [&] {
            tdctl->type("quit\r");
            auto status = tdctl->wait_exit(30s);
            REQUIRE_MESSAGE(status.has_value(), failure("tdctl did not end after quit"));
            REQUIRE_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 0), failure(describe_status(*status)));
            CHECK_MESSAGE(tdctl->screen().find("detached from process") != std::string::npos, failure("no detach"));
            REQUIRE_MESSAGE(!target.wait_exit(0ms).has_value(), failure("the target ended"));
            CHECK(tracer_pid(pid) == 0);
        };

        const std::uint64_t per_session = (lines + terminals.size() - 1) / terminals.size();
        for (std::uint64_t i = 0; i < lines; ++i) {
            if (i != 0 && i % per_session == 0) {
                end_session();
                ++session_no;
                tdctl = start_tdctl();
            }
            auto l = maker.next();
            typed = i + 1;
            ++kinds[l.kind];
            bytes += l.keys.size();
            recent.push_back(l.keys);
            if (recent.size() > 5)
                recent.erase(recent.begin());
            const auto line_started = std::chrono::steady_clock::now();
            bool ok = tdctl->type(l.keys + " \r", 30s) && sync(15s);
            seconds_by_kind[l.kind] +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - line_started).count();
            if (ok && target.wait_exit(0ms)) {
                // Only a line the editor turned into `kill` (cursor moves,
                // deletions, transposes: "k", Home, "ill" is one) may end the
                // target: tdctl says it killed it, and the status agrees.
                auto st = *target.wait_exit(0ms);
                const std::string said = fmt::format("process {} killed by SIGKILL", pid);
                REQUIRE_MESSAGE((st.term_signal() == SIGKILL && tdctl->screen().find(said) != std::string::npos),
                                failure("the target ended: " + st.describe()));
                ++kills;
                MESSAGE("line ", typed, " (", l.kind, ") was edited into kill: ", escape_bytes(l.keys.substr(0, 400)));
                tdctl->type("quit\r");
                REQUIRE_MESSAGE(tdctl->wait_exit(30s).has_value(), failure("tdctl did not end after quit"));
                target = start_endless_trickle();
                pid = target.pid();
                tdctl = start_tdctl();
                continue;
            }
            if (ok)
                continue;
            // A closed terminal: tdctl is gone or going; its status says how.
            if (auto st = tdctl->wait_exit(tdctl->is_closed() ? 10s : 0ms)) {
                // A line the editor turned into `quit` ends the session
                // cleanly; anything else is a crash.
                REQUIRE_MESSAGE((WIFEXITED(*st) && WEXITSTATUS(*st) == 0),
                                failure("tdctl ended: " + describe_status(*st)));
                REQUIRE_MESSAGE(tracer_pid(pid) == 0, failure("the target is still traced after tdctl quit"));
                ++restarts;
                MESSAGE("line ", typed, " (", l.kind, ") ended the session: ", escape_bytes(l.keys.substr(0, 400)));
                tdctl = start_tdctl();
                continue;
            }
            // A line that runs the target without a bound (an edit cut
            // `--for` off): Ctrl-C ends it, then the prompt answers.
            ++recoveries;
            MESSAGE("line ", typed, " (", l.kind, ") needed Ctrl-C: ", escape_bytes(l.keys.substr(0, 400)),
                    "\nscreen: ", tdctl->tail(600));
            tdctl->type("\x03");
            REQUIRE_MESSAGE(sync(30s), failure("tdctl does not answer, even after Ctrl-C"));
        }
        end_session();

        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        std::string mix;
        for (const auto& [k, n] : kinds)
            mix += fmt::format(" {} {} ({:.1f} s)", k, n, seconds_by_kind[k]);
        MESSAGE(fmt::format("{} lines ({} bytes) in {:.1f} s:{}; {} recovered with Ctrl-C, {} sessions ended by an "
                            "edited quit, {} targets by an edited kill",
                            lines, bytes, took, mix, recoveries, restarts, kills));
        CHECK_MESSAGE(wait_until([&] { auto s = proc_state(pid); return s && *s != 't' && *s != 'T'; }, 10s),
                      "state " << proc_state(pid).value_or('?'));
        // Lines are built to end by themselves; more than a few that needed
        // Ctrl-C means commands no longer keep their bounds.
        CHECK(recoveries <= static_cast<int>(lines / 100));
    }
}
