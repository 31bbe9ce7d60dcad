// `tdctl -p PID --agent` on a process that dlopen()ed libtdagent.so itself
// (fixtures/e2e_late_agent.c), some of its threads started before: the
// modules' GOT slots are routed to the agent while attached, every event the
// fixture provokes is reported — from the threads older than the agent too —
// and after detach every routed slot, the agent's reporting functions and
// flags hold what they held before, and no record of the agent reports.
//
// The fixture's rounds take a few ms each and every watch lasts seconds, so
// each event type shows up many times over; the tolerances are that wide on
// purpose (a loaded machine slows the rounds, not the checks).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <elf.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/inject/got_routing.hpp"
#include "symbols/elf_module.hpp"
#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;

namespace {

/// The running fixture and what it recorded about its threads.
struct late_target {
    test::temp_file record{"tdctl-late-agent"};
    test::child_process process;
    std::set<pid_t> early, late;
    pid_t mortal = 0;   ///< an early thread that returns once exit_file() exists

    late_target(const std::string& fixture, const std::string& agent)
        : process(test::child_process::spawn({fixture_path(fixture), "--record", record.path(), agent}))
    {
        std::string line = process.require_line(30s);
        REQUIRE_MESSAGE(line.starts_with("ready "), line);
        auto rec = read_fixture_record(record.path());
        for (const auto& [tid, label] : rec.threads) {
            if (label.starts_with("mortal"))
                mortal = tid;
            else
                (label.starts_with("early") ? early : late).insert(tid);
        }
        REQUIRE(mortal != 0);
        REQUIRE(early.size() == 2);
        REQUIRE(late.size() == 2);
    }
    pid_t pid() const { return process.pid(); }
    std::string exit_file() const { return record.path() + ".exit"; }
    ~late_target() { std::remove(exit_file().c_str()); }
};

/// One range of target memory and the bytes it held.
struct memory_span {
    std::string what;
    std::uint64_t address = 0;
    std::vector<std::uint8_t> bytes;
    /// For an import slot: where libc's function is, the value the dynamic
    /// loader writes at the first call of a lazily bound slot (0 if unknown).
    std::uint64_t loader_binding = 0;
};

/// Everything tdctl may change while attached with --agent, read from
/// /proc/PID/mem: the import slots of the wrapped functions in every module
/// (GOT), the agent's reporting functions (breakpoints), its global mask and
/// its unknown-thread record's flag.
std::vector<memory_span> snapshot(pid_t pid)
{
    std::vector<memory_span> out;
    auto modules = symbols::module_set::load(pid);
    auto wrapped = core::agent_wrapped_functions();
    const auto* libc = modules.find("libc.so.6");
    REQUIRE(libc != nullptr);
    for (const auto& m : modules.modules()) {
        for (const auto& slot : m->import_slots())
            if (std::find(wrapped.begin(), wrapped.end(), slot.name) != wrapped.end()) {
                auto bound = libc->lookup(slot.version.empty() ? slot.name : slot.name + "@" + slot.version);
                out.push_back({m->path() + ":" + slot.name, slot.address.value,
                               test::read_proc_mem(pid, slot.address.value, 8), bound ? bound->address.value : 0});
            }
    }
    const auto* agent = modules.find("libtdagent.so");
    REQUIRE(agent != nullptr);
    for (const char* name : {"__tdagent_event_create", "__tdagent_threads_events", "__tdagent_unknown_thread"}) {
        auto s = agent->lookup(name);
        REQUIRE_MESSAGE(s.has_value(), name);
        // The reporting functions lie together: 16 events' worth of bytes.
        std::size_t length = std::string_view(name) == "__tdagent_event_create" ? 256 : std::max<std::size_t>(s->size, 8);
        out.push_back({name, s->address.value, test::read_proc_mem(pid, s->address.value, length)});
    }
    return out;
}

/// The spans whose bytes differ, for messages. A lazily bound slot the
/// program called for the first time after the detach holds libc's
/// function then: the loader's write, not tdctl's (python3's
/// pthread_cond_wait slot, now and then, once watches stream).
std::string differences(const std::vector<memory_span>& before, const std::vector<memory_span>& after)
{
    std::string out;
    for (std::size_t i = 0; i < before.size() && i < after.size(); ++i) {
        std::uint64_t now = 0;
        std::memcpy(&now, after[i].bytes.data(), std::min<std::size_t>(8, after[i].bytes.size()));
        const bool bound_since = before[i].loader_binding != 0 && now == before[i].loader_binding;
        if (before[i].bytes != after[i].bytes && !bound_since)
            out += fmt::format("{} at {:#x} differs\n", before[i].what, before[i].address);
    }
    if (before.size() != after.size())
        out += "the number of spans differs\n";
    return out;
}

/// Where libtdagent.so is mapped in the target.
std::pair<std::uint64_t, std::uint64_t> agent_range(pid_t pid)
{
    std::uint64_t lo = ~0ull, hi = 0;
    for (const auto& m : test::proc_maps(pid))
        if (m.path.find("libtdagent.so") != std::string::npos) {  // a file, or memfd:libtdagent.so
            lo = std::min(lo, m.start);
            hi = std::max(hi, m.end);
        }
    return {lo, hi};
}

/// The GOT slots of the main executable's wrapped imports that point into the agent now.
std::size_t slots_into_agent(pid_t pid, const std::vector<memory_span>& slots)
{
    auto [lo, hi] = agent_range(pid);
    std::size_t n = 0;
    for (const auto& s : slots) {
        if (s.what.starts_with("__tdagent"))
            continue;
        auto now = test::read_proc_mem(pid, s.address, 8);
        std::uint64_t v = 0;
        std::memcpy(&v, now.data(), std::min<std::size_t>(8, now.size()));
        n += v >= lo && v < hi;
    }
    return n;
}

/// `tdctl --json -p PID --agent -e 'watch all --for S' -e detach`, its records split up.
tdctl_run attach_and_watch(pid_t pid, const std::string& seconds, std::vector<memory_span>* during = nullptr,
                           std::size_t* routed_seen = nullptr, const std::string& touch_mid_watch = {})
{
    test::temp_file out("tdctl-late-agent-json");
    std::vector<std::string> cmd{test::tdctl_path(), "--json", "-o", out.path(), "-p", std::to_string(pid), "--agent",
                                 "-e", "watch all --for " + seconds, "-e", "detach"};
    auto result = [&] {
        if (during == nullptr)
            return test::run_command(cmd, 120s);
        // Half-way through the watch the slots must point into the agent.
        auto tdctl = test::child_process::spawn(cmd);
        std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(std::stod(seconds) * 500)));
        *routed_seen = slots_into_agent(pid, *during);
        if (!touch_mid_watch.empty())
            std::fclose(std::fopen(touch_mid_watch.c_str(), "w"));
        auto status = tdctl.require_exit(120s);
        return test::command_result{status, tdctl.stdout_text(), tdctl.stderr_text(), test::shell_quote(cmd)};
    }();
    tdctl_run run{result, {}, {}, {}, {}, {}};
    auto text = test::read_text_file(out.path());
    REQUIRE_MESSAGE(text.has_value(), run.result.describe());
    run.records = test::json_lines(*text);
    for (const auto& r : run.records) {
        if (r.value("type", "") != "event")
            continue;
        observed_event e;
        e.event = r.value("event", "");
        e.tid = r.value("tid", 0);
        e.reporter = r.value("reporter", 0);
        e.raw = r;
        run.events.push_back(std::move(e));
    }
    return run;
}

std::map<std::string, std::size_t> events_by(const tdctl_run& run, const std::set<pid_t>& reporters)
{
    std::map<std::string, std::size_t> n;
    for (const auto& e : run.events)
        if (reporters.contains(e.reporter))
            ++n[e.event];
    return n;
}

/// The agent's records on its live list, and how many have reporting on
/// (read through the agent's own descriptors).
std::pair<std::size_t, std::size_t> records_reporting(pid_t pid)
{
    auto modules = symbols::module_set::load(pid);
    const auto* agent = modules.find("libtdagent.so");
    REQUIRE(agent != nullptr);
    auto list = agent->lookup("__tdagent_thread_list");
    auto flag = agent->lookup("_tdagent_db_pthread_report_events");
    auto link = agent->lookup("_tdagent_db_pthread_list");
    REQUIRE((list && flag && link));
    auto read_u32 = [&](std::uint64_t a) {
        auto b = test::read_proc_mem(pid, a, 4);
        std::uint32_t v = 0;
        std::memcpy(&v, b.data(), std::min<std::size_t>(4, b.size()));
        return v;
    };
    auto read_u64 = [&](std::uint64_t a) {
        auto b = test::read_proc_mem(pid, a, 8);
        std::uint64_t v = 0;
        std::memcpy(&v, b.data(), std::min<std::size_t>(8, b.size()));
        return v;
    };
    const std::uint32_t flag_offset = read_u32(flag->address.value + 8);
    const std::uint32_t link_offset = read_u32(link->address.value + 8);
    std::size_t records = 0, on = 0;
    std::uint64_t head = list->address.value;
    for (std::uint64_t l = read_u64(head); l != head && l != 0 && records < 1000; l = read_u64(l)) {
        ++records;
        on += test::read_proc_mem(pid, l - link_offset + flag_offset, 1).at(0) != 0;
    }
    return {records, on};
}

void check_full_route(const std::string& fixture)
{
    test::require_ptrace();
    late_target target(fixture, agent_library());
    auto before = snapshot(target.pid());
    std::size_t routed_seen = 0;
    auto run = attach_and_watch(target.pid(), "3", &before, &routed_seen, target.exit_file());
    INFO(describe_run(run));
    REQUIRE(run.result.status.is_success());

    auto attached = std::find_if(run.records.begin(), run.records.end(),
                                 [](const auto& r) { return r.value("type", "") == "attached"; });
    REQUIRE(attached != run.records.end());
    CHECK(attached->value("backend", "") == "tdagent");
    REQUIRE(attached->contains("routed"));
    CHECK((*attached)["routed"].value("slots", 0) > 0);
    MESSAGE(fmt::format("{}: routed {}, {} of the executable's slots pointed into the agent mid-watch", fixture,
                        (*attached)["routed"].dump(), routed_seen));
    CHECK(routed_seen > 0);

    // Every event type the fixture provokes, from the threads that existed
    // before the agent as well as from those started after it.
    for (const auto* who : {&target.early, &target.late}) {
        auto n = events_by(run, *who);
        for (const char* e : {"TD_LOCK_TRY", "TD_SLEEP", "TD_READY", "TD_TIMEOUT", "TD_CATCHSIG", "TD_CREATE",
                              "TD_REAP", "TD_CONCURRENCY"})
            CHECK_MESSAGE(n[e] > 0, fmt::format("no {} from the {} threads", e, who == &target.early ? "early" : "late"));
    }
    std::size_t deaths = 0;
    for (const auto& e : run.events) {
        deaths += e.event == "TD_DEATH";
        // An adoption is not shown as a birth: TD_CREATE is about another thread.
        if (e.event == "TD_CREATE")
            CHECK(e.tid != e.reporter);
    }
    CHECK(deaths > 0);
    // The thread older than the agent that ended during the watch: its
    // TD_DEATH comes from the agent's adoption (a TSD destructor).
    CHECK(std::count_if(run.events.begin(), run.events.end(), [&](const auto& e) {
              return e.event == "TD_DEATH" && e.reporter == target.mortal && e.tid == target.mortal;
          }) == 1);

    // Detached: everything is as before, and no record reports.
    REQUIRE(test::wait_until([&] { return test::tracer_pid(target.pid()) == 0; }, 5s));
    auto after = snapshot(target.pid());
    CHECK_MESSAGE(differences(before, after).empty(), differences(before, after));
    auto [records, on] = records_reporting(target.pid());
    CHECK(records >= 5);   // main, 4 workers (adopted or started through the agent); the mortal one is gone
    CHECK(on == 0);
    CHECK_FALSE(target.process.wait_exit(0ms).has_value());
}

}  // namespace

TEST_CASE("attach --agent to a process that dlopen()ed the agent: routed, every event, restored (PLT)")
{
    check_full_route("e2e_late_agent");
}

TEST_CASE("attach --agent with -fno-plt -Wl,-z,now: GLOB_DAT slots in RELRO routed and restored")
{
    check_full_route("e2e_late_agent_noplt");
}

TEST_CASE("attach --agent and detach 20 times: the agent is reused, everything restored each time")
{
    test::require_ptrace();
    late_target target("e2e_late_agent", agent_library());
    auto before = snapshot(target.pid());
    for (int i = 0; i < 20; ++i) {
        auto run = attach_and_watch(target.pid(), "0.3");
        INFO("attach ", i + 1, "\n", describe_run(run));
        REQUIRE(run.result.status.is_success());
        CHECK(events_by(run, target.early)["TD_LOCK_TRY"] + events_by(run, target.late)["TD_LOCK_TRY"] > 0);
        REQUIRE(test::wait_until([&] { return test::tracer_pid(target.pid()) == 0; }, 5s));
        auto after = snapshot(target.pid());
        REQUIRE_MESSAGE(differences(before, after).empty(), differences(before, after));
        CHECK(records_reporting(target.pid()).second == 0);
    }
    CHECK_FALSE(target.process.wait_exit(0ms).has_value());
}

TEST_CASE("attach --agent to a process without the agent loads it, routes its calls, and puts every slot back")
{
    test::require_ptrace();
    late_target target("e2e_late_agent", "none");
    // The first attach loads the agent (no events asked for) and detaches.
    auto load = test::run_command({test::tdctl_path(), "-p", std::to_string(target.pid()), "--agent", "-e", "detach"},
                                  60s);
    INFO(load.describe());
    REQUIRE(load.status.is_success());
    CHECK(load.out.find("loaded into process") != std::string::npos);
    REQUIRE(test::wait_until([&] { return test::tracer_pid(target.pid()) == 0; }, 5s));
    // From here on it is a process with the agent in it: the next attach
    // reuses it, routes the calls of every worker (all older than the agent)
    // and puts every slot back.
    auto before = snapshot(target.pid());
    std::size_t routed_seen = 0;
    auto run = attach_and_watch(target.pid(), "2", &before, &routed_seen);
    INFO(describe_run(run));
    REQUIRE(run.result.status.is_success());
    CHECK(routed_seen > 0);
    for (const auto* who : {&target.early, &target.late}) {
        auto n = events_by(run, *who);
        for (const char* e : {"TD_LOCK_TRY", "TD_SLEEP", "TD_READY", "TD_CREATE"})
            CHECK_MESSAGE(n[e] > 0, fmt::format("no {} from the {} threads", e, who == &target.early ? "early" : "late"));
    }
    REQUIRE(test::wait_until([&] { return test::tracer_pid(target.pid()) == 0; }, 5s));
    auto after = snapshot(target.pid());
    CHECK_MESSAGE(differences(before, after).empty(), differences(before, after));
    CHECK(records_reporting(target.pid()).second == 0);
    CHECK_FALSE(target.process.wait_exit(0ms).has_value());
}

TEST_CASE("attach without --agent to a process that dlopen()ed the agent keeps nptl")
{
    test::require_ptrace();
    late_target target("e2e_late_agent", agent_library());
    auto before = snapshot(target.pid());
    auto result = test::run_command({test::tdctl_path(), "--json", "-p", std::to_string(target.pid()), "-e", "threads"},
                                    30s);
    INFO(result.describe());
    REQUIRE(result.status.is_success());
    auto records = test::json_lines(result.out);
    auto attached = std::find_if(records.begin(), records.end(),
                                 [](const auto& r) { return r.value("type", "") == "attached"; });
    REQUIRE(attached != records.end());
    CHECK(attached->value("backend", "") == "nptl");
    CHECK_FALSE(attached->contains("routed"));
    REQUIRE(test::wait_until([&] { return test::tracer_pid(target.pid()) == 0; }, 5s));
    CHECK(differences(before, snapshot(target.pid())).empty());
}

namespace {

/// `readelf -W <args> path` split into lines; empty when readelf is missing.
std::vector<std::string> readelf_lines(const std::vector<std::string>& args, const std::string& path)
{
    auto readelf = find_on_path("readelf");
    if (!readelf)
        return {};
    std::vector<std::string> argv{*readelf, "-W"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(path);
    auto r = test::run_command(argv, 30s);
    std::vector<std::string> lines;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
        lines.push_back(line);
    return lines;
}

}  // namespace

TEST_CASE("import slots are readelf's JUMP_SLOT and GLOB_DAT relocations of undefined symbols")
{
    if (!find_on_path("readelf")) {
        MESSAGE("readelf (binutils) is not installed: nothing to compare with");
        return;
    }
    for (const char* name : {"e2e_late_agent", "e2e_late_agent_noplt"}) {
        auto module = symbols::elf_module::open_file(fixture_path(name), target_addr{0});
        REQUIRE(module != nullptr);
        std::set<std::string> ours, theirs;
        std::size_t plt = 0;
        for (const auto& s : module->import_slots()) {
            ours.insert(fmt::format("{:x} {}{}{}", s.address.value, s.name, s.version.empty() ? "" : "@", s.version));
            plt += s.is_plt;
        }
        // "offset info type value name@version + addend", undefined: value 0.
        for (const auto& line : readelf_lines({"-r"}, fixture_path(name))) {
            std::istringstream in(line);
            std::string offset, info, type, value, symbol;
            in >> offset >> info >> type >> value >> symbol;
            if ((type == "R_X86_64_JUMP_SLOT" || type == "R_X86_64_GLOB_DAT") &&
                value.find_first_not_of('0') == std::string::npos && !symbol.empty())
                theirs.insert(fmt::format("{:x} {}", std::stoull(offset, nullptr, 16), symbol));
        }
        INFO(name);
        CHECK(ours == theirs);
        CHECK(ours.contains(fmt::format("{:x} pthread_mutex_lock@GLIBC_2.2.5",
                                        [&] {
                                            for (const auto& s : module->import_slots())
                                                if (s.name == "pthread_mutex_lock")
                                                    return s.address.value;
                                            return std::uint64_t{0};
                                        }())));
        // Lazy PLT calls in one, GOT-only calls (no JUMP_SLOT) in the other.
        if (std::string_view(name) == "e2e_late_agent_noplt")
            CHECK(plt == 0);
        else
            CHECK(plt > 0);
    }
}

TEST_CASE("the routed functions are the agent's wrappers of libc functions, all of them")
{
    auto agent = symbols::elf_module::open_file(agent_library(), target_addr{0});
    REQUIRE(agent != nullptr);
    auto wrapped = core::agent_wrapped_functions();
    for (auto name : wrapped) {
        auto s = agent->lookup(name);
        CHECK_MESSAGE((s && s->type == STT_FUNC), name);
    }
    // Every function the agent exports that libc also defines is routed.
    auto libc_path = [] {
        for (const char* p : {"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"})
            if (access(p, R_OK) == 0)
                return std::string(p);
        return std::string();
    }();
    if (libc_path.empty() || !find_on_path("readelf")) {
        MESSAGE("no libc.so.6 or readelf to compare with");
        return;
    }
    auto libc = symbols::elf_module::open_file(libc_path, target_addr{0});
    for (const auto& line : readelf_lines({"--dyn-syms"}, agent_library())) {
        std::istringstream in(line);
        std::string num, value, size, type, bind, vis, ndx, name;
        in >> num >> value >> size >> type >> bind >> vis >> ndx >> name;
        if (type != "FUNC" || ndx == "UND" || name.empty())
            continue;
        name = name.substr(0, name.find('@'));
        if (libc->lookup(name))
            CHECK_MESSAGE(std::find(wrapped.begin(), wrapped.end(), name) != wrapped.end(), name, " is not routed");
    }
}

TEST_CASE("python3 that loaded the agent with ctypes: its threads' lock waits reported, everything restored")
{
    test::require_ptrace();
    auto python = find_on_path("python3");
    if (!python) {
        MESSAGE("python3 is not installed");
        return;
    }
    // Two threads before the CDLL, two after, all taking one lock in turn
    // (holding it 2 ms, so the others wait).
    test::temp_file script("tdctl-late-agent-py");
    {
        std::FILE* f = std::fopen(script.path().c_str(), "w");
        REQUIRE(f != nullptr);
        std::fputs("import ctypes, os, sys, threading, time\n"
                   "lock = threading.Lock()\n"
                   "def worker():\n"
                   "    while True:\n"
                   "        with lock:\n"
                   "            time.sleep(0.002)\n"
                   "def start(n):\n"
                   "    ts = [threading.Thread(target=worker, daemon=True) for _ in range(n)]\n"
                   "    for t in ts: t.start()\n"
                   "    return ts\n"
                   "early = start(2)\n"
                   "time.sleep(0.2)\n"
                   "ctypes.CDLL(sys.argv[1])\n"
                   "late = start(2)\n"
                   "print('ready', os.getpid(), *[t.native_id for t in early + late], flush=True)\n"
                   "while True:\n"
                   "    time.sleep(1)\n",
                   f);
        std::fclose(f);
    }
    auto py = test::child_process::spawn({*python, script.path(), agent_library()});
    std::istringstream ready(py.require_line(30s));
    std::string word;
    pid_t pid = 0;
    ready >> word >> pid;
    REQUIRE(word == "ready");
    std::set<pid_t> early, late;
    for (int i = 0; i < 4; ++i) {
        pid_t tid = 0;
        ready >> tid;
        (i < 2 ? early : late).insert(tid);
    }
    auto before = snapshot(pid);
    auto run = attach_and_watch(pid, "2");
    INFO(describe_run(run));
    REQUIRE(run.result.status.is_success());
    for (const auto* who : {&early, &late}) {
        auto n = events_by(run, *who);
        MESSAGE(fmt::format("python3 {} threads: {} SLEEP, {} READY, {} LOCK_TRY", who == &early ? "early" : "late",
                            n["TD_SLEEP"], n["TD_READY"], n["TD_LOCK_TRY"]));
        CHECK(n["TD_SLEEP"] > 0);
        CHECK(n["TD_READY"] > 0);
    }
    REQUIRE(test::wait_until([&] { return test::tracer_pid(pid) == 0; }, 5s));
    CHECK_MESSAGE(differences(before, snapshot(pid)).empty(), differences(before, snapshot(pid)));
    CHECK(records_reporting(pid).second == 0);
}
