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
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

#include "core/got_routing.hpp"
#include "symbols/elf_module.hpp"
#include "tests/agent_e2e/agent_e2e_support.hpp"
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

/// One range of target memory and the bytes it held.
struct memory_span {
    std::string what;
    std::uint64_t address = 0;
    std::vector<std::uint8_t> bytes;
    /// A GOT slot: what the dynamic loader binds it to (libc's definition of
    /// the symbol at the slot's version), so that a lazy slot the program
    /// bound after the detach, by its first call, is told apart; else 0.
    std::uint64_t loader_binding = 0;
};

std::uint64_t read_u64(pid_t pid, std::uint64_t address, std::size_t length = 8)
{
    auto b = test::read_proc_mem(pid, address, length);
    std::uint64_t v = 0;
    std::memcpy(&v, b.data(), std::min<std::size_t>(length, b.size()));
    return v;
}

/// The agent's per-thread settings: for every record on __tdagent_thread_list,
/// its report_events flag and its event mask (offsets and sizes from the
/// agent's _tdagent_db_* descriptors: uint32 size in bits, count, offset).
void add_agent_records(pid_t pid, const symbols::elf_module& agent, std::vector<memory_span>& out)
{
    auto list = agent.lookup("__tdagent_thread_list");
    auto flag = agent.lookup("_tdagent_db_pthread_report_events");
    auto mask = agent.lookup("_tdagent_db_pthread_eventbuf_eventmask");
    auto link = agent.lookup("_tdagent_db_pthread_list");
    REQUIRE((list && flag && mask && link));
    const auto flag_bytes = read_u64(pid, flag->address.value, 4) / 8;
    const auto flag_offset = read_u64(pid, flag->address.value + 8, 4);
    const auto mask_bytes = read_u64(pid, mask->address.value, 4) / 8;
    const auto mask_offset = read_u64(pid, mask->address.value + 8, 4);
    const auto link_offset = read_u64(pid, link->address.value + 8, 4);
    REQUIRE((flag_bytes > 0 && mask_bytes > 0));
    std::size_t records = 0;
    const std::uint64_t head = list->address.value;
    for (std::uint64_t l = read_u64(pid, head); l != head && l != 0 && records < 10000; l = read_u64(pid, l)) {
        ++records;
        const std::uint64_t record = l - link_offset;
        out.push_back({fmt::format("record {:#x} report_events", record), record + flag_offset,
                       test::read_proc_mem(pid, record + flag_offset, flag_bytes)});
        out.push_back({fmt::format("record {:#x} event mask", record), record + mask_offset,
                       test::read_proc_mem(pid, record + mask_offset, mask_bytes)});
    }
}

/// Everything tdctl may change while attached with --agent (see the top).
std::vector<memory_span> snapshot(pid_t pid)
{
    std::vector<memory_span> out;
    auto modules = symbols::module_set::load(pid);
    auto wrapped = core::agent_wrapped_functions();
    const auto* libc = modules.find("libc.so.6");
    REQUIRE(libc != nullptr);
    for (const auto& m : modules.modules())
        for (const auto& slot : m->import_slots())
            if (std::find(wrapped.begin(), wrapped.end(), slot.name) != wrapped.end()) {
                auto bound = libc->lookup(slot.version.empty() ? slot.name : slot.name + "@" + slot.version);
                out.push_back({m->path() + ":" + slot.name, slot.address.value,
                               test::read_proc_mem(pid, slot.address.value, 8), bound ? bound->address.value : 0});
            }
    const auto* agent = modules.find("libtdagent.so");
    if (agent == nullptr)
        return out;
    for (const char* e : {"create", "death", "reap", "ready", "sleep", "lock_try", "catchsig", "timeout",
                          "concurrency", "pri_inherit", "switchto", "switchfrom", "preempt", "idle"}) {
        // Each is a `ret` and padding to 16 bytes; a breakpoint covers more than the `ret`.
        auto s = agent->lookup(std::string("__tdagent_event_") + e);
        if (s)
            out.push_back({s->name, s->address.value, test::read_proc_mem(pid, s->address.value, 16)});
    }
    for (const char* name : {"__tdagent_threads_events", "__tdagent_unknown_thread"}) {
        auto s = agent->lookup(name);
        REQUIRE_MESSAGE(s.has_value(), name);
        out.push_back({name, s->address.value, test::read_proc_mem(pid, s->address.value, std::max<std::size_t>(s->size, 8))});
    }
    add_agent_records(pid, *agent, out);
    return out;
}

std::string bytes_hex(const std::vector<std::uint8_t>& bytes)
{
    std::string out;
    for (auto b : bytes)
        out += fmt::format("{:02x}", b);
    return out;
}

/// Spans present in both snapshots whose bytes differ, but for a lazy GOT
/// slot the program bound meanwhile (counted in `bound`); and how many spans
/// only one of them has (records of threads born or ended meanwhile).
std::string differences(const std::vector<memory_span>& before, const std::vector<memory_span>& after,
                        std::size_t& only_one, std::size_t& bound)
{
    std::map<std::string, const memory_span*> later;
    for (const auto& s : after)
        later[s.what] = &s;
    std::string out;
    std::size_t unmatched = 0;
    for (const auto& s : before) {
        auto it = later.find(s.what);
        if (it == later.end()) {
            ++unmatched;
            continue;
        }
        std::uint64_t now = 0;
        std::memcpy(&now, it->second->bytes.data(), std::min<std::size_t>(8, it->second->bytes.size()));
        if (it->second->bytes != s.bytes && s.loader_binding != 0 && now == s.loader_binding)
            ++bound;
        else if (it->second->bytes != s.bytes)
            out += fmt::format("{} at {:#x}: {} before, {} after\n", s.what, s.address, bytes_hex(s.bytes),
                               bytes_hex(it->second->bytes));
        later.erase(it);
    }
    only_one = unmatched + later.size();
    return out;
}

/// One change tdctl's journal recorded (its TDCTL_DEBUG line).
struct journal_entry {
    std::string kind;
    std::uint64_t address = 0;
    std::size_t length = 0;
};

std::vector<journal_entry> journal_entries(const std::string& debug_text)
{
    static const std::regex line(R"(tdctl: debug: journal: (.+) (\d+) bytes at 0x([0-9a-f]+))");
    std::vector<journal_entry> out;
    std::istringstream in(debug_text);
    for (std::string l; std::getline(in, l);) {
        std::smatch m;
        if (std::regex_search(l, m, line))
            out.push_back({m[1], std::stoull(m[3], nullptr, 16), std::stoul(m[2])});
    }
    return out;
}

bool is_mapped(pid_t pid, std::uint64_t address)
{
    for (const auto& m : test::proc_maps(pid))
        if (address >= m.start && address < m.end)
            return true;
    return false;
}

bool covers(const std::vector<memory_span>& snap, const journal_entry& e)
{
    return std::any_of(snap.begin(), snap.end(), [&](const memory_span& s) {
        return e.address >= s.address && e.address + e.length <= s.address + s.bytes.size();
    });
}

/// Journal entries that were not compared and are not accounted for: every
/// entry must lie in a span of the snapshots taken before and after the
/// round, or be injected bytes now unmapped (the loader's pages) or a
/// return slot (8 bytes on the hijacked thread's stack, put back as each
/// call returned), or belong to the record of a thread that ended during
/// the round. Such a record is off the live list now (`live`: a snapshot
/// taken after the others); one that is on it again belongs to a thread born
/// since, and must hold what a new record holds, zeros.
std::string uncovered(pid_t pid, const std::vector<journal_entry>& entries,
                      const std::vector<const std::vector<memory_span>*>& compared,
                      const std::vector<memory_span>& live, std::map<std::string, int>& kinds)
{
    std::string out;
    for (const auto& e : entries) {
        ++kinds[e.kind];
        if (std::any_of(compared.begin(), compared.end(), [&](const auto* snap) { return covers(*snap, e); }))
            continue;
        if (e.kind == "injected bytes" && (!is_mapped(pid, e.address) || e.length == 8))
            continue;
        const bool record = e.kind == "thread enable flag" || e.kind == "thread event mask";
        auto now = test::read_proc_mem(pid, e.address, e.length);
        const bool zero = std::all_of(now.begin(), now.end(), [](std::uint8_t b) { return b == 0; });
        if (record && !covers(live, e)) {
            ++kinds[fmt::format("  of them, records of ended threads, {}", zero ? "zero" : "not zero")];
            continue;
        }
        if (record && zero) {
            ++kinds["  of them, records of threads born since, zero"];
            continue;
        }
        out += fmt::format("{} {} bytes at {:#x}: {}\n", e.kind, e.length, e.address, bytes_hex(now));
    }
    return out;
}

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
