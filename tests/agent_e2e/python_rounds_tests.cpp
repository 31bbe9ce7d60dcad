// `tdctl -p PID --agent` on a running /usr/bin/python3, attached and detached
// 20 times (the first attach loads the agent, the others reuse it), each
// time with `watch all --for 1`:
//
// - every event type the script provokes is reported in every round:
//   threads born and ended (TD_CREATE, TD_DEATH), threads taking turns on a
//   threading.Lock and on the GIL (TD_LOCK_TRY, TD_SLEEP, TD_READY), a
//   thread keeping the GIL 10 ms at a time (the others' 5 ms timed waits
//   for it end in TD_TIMEOUT), a SIGUSR1 handler installed again and the
//   signal raised (TD_CATCHSIG); plus any other type the first round
//   reported (TD_REAP, TD_CONCURRENCY here);
// - after each detach, everything tdctl may change is as it was before the
//   round, byte for byte, read through /proc/PID/mem: the GOT slots of the
//   functions the agent wraps, in every module, and once the agent is there
//   its reporting functions, global mask, unknown-thread record and every
//   thread record's enable flag and event mask. Every change tdctl's
//   journal recorded (its TDCTL_DEBUG lines) lies inside one of those spans,
//   or was injected for the load and is unmapped now, or is a remote call's
//   return slot, or is in the record of a thread that ended during the
//   round (off the agent's live list; the agent clears a record when it
//   hands it out again). A lazy GOT slot the program itself bound after the
//   detach (its first call) is told apart and counted;
// - the interpreter's own checks (fixture script below) see no EINTR and no
//   exception: a thread blocked in read(2) on a pipe and one in
//   nanosleep(2), both called through ctypes so that an EINTR is seen
//   (Python's own os.read and time.sleep retry it, PEP 475), one looping in
//   time.sleep(0.2) (never early), one waiting on a threading.Lock (woken
//   exactly once per check); these block SIGUSR1.
//
// Tolerances: the script's events recur every 20 ms and each watch lasts a
// second, so every type shows up many times per round even on a loaded
// machine.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/agent_e2e/agent_memory_snapshot.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;

namespace {

constexpr const char* python = "/usr/bin/python3";

// The target. Prints "ready PID" once every kind of thread runs; "check"
// wakes the read and lock threads once and answers with the counts.
constexpr const char* script = R"(import ctypes, os, signal, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
USR1 = {signal.SIGUSR1}
counts = dict.fromkeys(["read_eintr", "read_wakes", "nanosleep_eintr", "sleep_early", "sleeps", "lock_wakes",
                        "exceptions", "caught", "born"], 0)
guard = threading.Lock()
def bump(key):
    with guard:
        counts[key] += 1
def checker(body):
    def run():
        signal.pthread_sigmask(signal.SIG_BLOCK, USR1)
        try:
            body()
        except BaseException as e:
            bump("exceptions")
            print("exception", repr(e), file=sys.stderr, flush=True)
    threading.Thread(target=run, daemon=True).start()
read_r, read_w = os.pipe()
def reader():
    buf = ctypes.create_string_buffer(1)
    while True:
        bump("read_wakes" if libc.read(read_r, buf, 1) == 1 else "read_eintr")
class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
def raw_sleeper():
    while True:
        if libc.nanosleep(ctypes.byref(timespec(3600, 0)), ctypes.byref(timespec())) != 0:
            bump("nanosleep_eintr")
def sleeper():
    while True:
        t0 = time.monotonic()
        time.sleep(0.2)
        bump("sleeps")
        if time.monotonic() - t0 < 0.2:
            bump("sleep_early")
gate = threading.Lock()
gate.acquire()
def lock_waiter():
    while True:
        gate.acquire()
        bump("lock_wakes")
contended = threading.Lock()
def contender():
    while True:
        with contended:
            time.sleep(0.001)
def gil_holder():
    while True:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.01:
            pass
        time.sleep(0.03)
for body in (reader, raw_sleeper, sleeper, lock_waiter, contender, contender, gil_holder):
    checker(body)
def control():
    for line in sys.stdin:
        if line.startswith("check"):
            with guard:
                before = (counts["read_wakes"], counts["lock_wakes"])
            os.write(read_w, b"x")
            gate.release()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with guard:
                    if counts["read_wakes"] > before[0] and counts["lock_wakes"] > before[1]:
                        break
                time.sleep(0.001)
            with guard:
                print(" ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
checker(control)
def on_usr1(sig, frame):
    bump("caught")
first = True
while True:
    t = threading.Thread(target=lambda: bump("born"))
    t.start()
    t.join()
    signal.signal(signal.SIGUSR1, on_usr1)
    signal.raise_signal(signal.SIGUSR1)
    if first:
        print("ready", os.getpid(), flush=True)
        first = False
    time.sleep(0.02)
)";


/// The script's answer to "check".
std::map<std::string, int> check(test::child_process& py)
{
    std::string line = py.ask("check", std::chrono::milliseconds{20000});
    std::map<std::string, int> c;
    std::istringstream in(line);
    for (std::string word; in >> word;) {
        auto eq = word.find('=');
        REQUIRE_MESSAGE(eq != std::string::npos, line);
        c[word.substr(0, eq)] = std::stoi(word.substr(eq + 1));
    }
    REQUIRE_MESSAGE(c.size() == 9, line);
    return c;
}

/// What the rounds found, for the closing message.
struct round_tally {
    std::set<std::string> required{"TD_CREATE", "TD_DEATH", "TD_LOCK_TRY", "TD_SLEEP", "TD_READY", "TD_TIMEOUT",
                                   "TD_CATCHSIG"};
    std::map<std::string, int> kinds;   ///< journal entries by kind
    std::size_t lazily_bound = 0;
};

/// `tdctl --json -p PID --agent -e 'watch all --for 1' -e detach` once, then
/// the events and the target's memory checked (see the top).
void attach_round(pid_t pid, int round, round_tally& tally)
{
    auto before = snapshot(pid);
    test::temp_file out("tdctl-python-rounds-json");
    auto result = test::run_command({test::tdctl_path(), "--json", "-o", out.path(), "-p", std::to_string(pid),
                                     "--agent", "-e", "watch all --for 1", "-e", "detach"},
                                    std::chrono::milliseconds{60000}, {.stdin_text = {}, .env = {{"TDCTL_DEBUG", "1"}}});
    REQUIRE_MESSAGE(result.status.is_success(), result.describe());
    auto text = test::read_text_file(out.path());
    REQUIRE(text.has_value());
    std::map<std::string, int> seen;
    std::string action;
    for (const auto& r : test::json_lines(*text)) {
        if (r.value("type", "") == "event")
            ++seen[r.value("event", "")];
        if (r.value("type", "") == "agent")
            action = r.value("action", "");
    }
    CHECK(action == (round == 0 ? "loaded" : "reused"));
    if (round == 0)
        for (const auto& [e, n] : seen)
            tally.required.insert(e);
    std::string counts;
    for (const auto& [e, n] : seen)
        counts += fmt::format(" {} {}", e, n);
    INFO("events:", counts);
    for (const auto& e : tally.required)
        CHECK_MESSAGE(seen[e] > 0, "no ", e);

    REQUIRE(test::wait_until([&] { return test::tracer_pid(pid) == 0; }, std::chrono::milliseconds{5000}));
    auto after = snapshot(pid);
    std::size_t only_one = 0;
    auto diff = differences(before, after, only_one, tally.lazily_bound);
    CHECK_MESSAGE(diff.empty(), diff);
    auto entries = journal_entries(result.err);
    CHECK(!entries.empty());
    auto missed = uncovered(pid, entries, {&before, &after}, snapshot(pid), tally.kinds);
    CHECK_MESSAGE(missed.empty(), "journaled, not compared:\n", missed);
    if (round == 0 || round == 19)
        MESSAGE(fmt::format("round {}: {} spans compared ({} only before or after), {} journal entries;{}", round + 1,
                            after.size(), only_one, entries.size(), counts));
}

}  // namespace

TEST_CASE("python3: 20 attaches with --agent; every event type each time, everything put back, no EINTR")
{
    test::require_ptrace();
    if (access(python, X_OK) != 0)
        test::skip_test("/usr/bin/python3 is not installed");
    test::temp_file file("tdctl-python-rounds");
    {
        std::FILE* f = std::fopen(file.path().c_str(), "w");
        REQUIRE(f != nullptr);
        std::fputs(script, f);
        std::fclose(f);
    }
    auto py = test::child_process::spawn({python, file.path()});
    std::istringstream ready(py.require_line(std::chrono::milliseconds{30000}));
    std::string word;
    pid_t pid = 0;
    ready >> word >> pid;
    REQUIRE(word == "ready");
    auto start = check(py);
    round_tally tally;
    for (int round = 0; round < 20; ++round) {
        CAPTURE(round);
        attach_round(pid, round, tally);
        auto c = check(py);
        CHECK(c["read_eintr"] == 0);
        CHECK(c["nanosleep_eintr"] == 0);
        CHECK(c["sleep_early"] == 0);
        CHECK(c["exceptions"] == 0);
        CHECK(c["read_wakes"] == start["read_wakes"] + round + 1);
        CHECK(c["lock_wakes"] == start["lock_wakes"] + round + 1);
    }
    std::string kinds;
    for (const auto& [k, n] : tally.kinds)
        kinds += fmt::format(" {}: {};", k, n);
    MESSAGE("journal entries over 20 rounds by kind:", kinds, " lazy GOT slots the program bound after a detach: ",
            tally.lazily_bound);
    CHECK_FALSE(py.wait_exit(std::chrono::milliseconds{0}).has_value());
}
