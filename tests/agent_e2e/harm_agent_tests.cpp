// SIGKILL of tdctl while the agent reports: its report stops are safe to
// lose. With libtdagent.so, a report stops its thread with a signal whose
// disposition is "ignore" (agent/event_report.c), not with a trap byte: a
// thread the kernel lets go in that stop when its tracer dies, or one that
// reports with no tracer left, goes on. Checked on a thread storm (thousands
// of reports a second) against the two ways tdctl dies: the tracer process
// alone (the first tdctl then puts the stop flags back), and both processes
// at once (`pkill -9 tdctl`: nothing puts anything back, and the target must
// live anyway; the next session resets the flags). The same with `watch
// --stream`, whose streaming flag the first tdctl puts back too.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <thread>

#include <csignal>
#include <sys/types.h>
#include <thread_db.h>

#include <fmt/format.h>

#include "symbols/elf_module.hpp"
#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;

namespace {

/// The thread storm of tests/fixtures (creators, detached and joinable
/// chains) with the agent preloaded, started and released.
test::child_process start_storm_with_agent()
{
    auto t = test::child_process::spawn({test::fixture_path("storm"), "--wait-start", "0"},
                                        {.env = {{"LD_PRELOAD", agent_library()}}});
    REQUIRE(t.require_line(10s) == fmt::format("ready {}", t.pid()));
    REQUIRE(t.write_stdin("x"));
    return t;
}

/// The target address of the agent's `symbol` (its lowest mapping is its
/// load bias: the library's first segment starts at 0).
std::uint64_t agent_symbol(pid_t pid, const char* symbol)
{
    std::uint64_t base = ~0ull;
    for (const auto& m : test::proc_maps(pid))
        if (m.path.find("libtdagent.so") != std::string::npos)
            base = std::min(base, m.start);
    REQUIRE(base != ~0ull);
    auto agent = symbols::elf_module::open_file(agent_library(), target_addr{base});
    REQUIRE(agent != nullptr);
    auto s = agent->lookup(symbol);
    REQUIRE(s);
    return s->address.value;
}

/// The agent's 16 stop flags (__tdagent_stop_signals): the count of non-zero ones.
int stop_flags_set(pid_t pid, std::uint64_t flags)
{
    auto bytes = test::read_proc_mem(pid, flags, 16);
    return static_cast<int>(std::count_if(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b != 0; }));
}

/// The tracer: the child of the tdctl the user started.
pid_t tracer_of(const test::child_process& tdctl)
{
    auto children = test::read_text_file(fmt::format("/proc/{0}/task/{0}/children", tdctl.pid())).value_or("");
    return static_cast<pid_t>(std::strtol(children.c_str(), nullptr, 10));
}

bool await_attached(test::child_process& tdctl)
{
    for (auto deadline = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < deadline;) {
        auto line = tdctl.read_line(200ms);
        if (line && line->find("\"type\":\"attached\"") != std::string::npos)
            return true;
    }
    return false;
}

}  // namespace

namespace {

/// Four threads contending on two mutexes, a contention every few
/// milliseconds for minutes (e2e_locks, holds of 1 ms), with the agent.
test::child_process start_lock_contention_with_agent()
{
    auto t = test::child_process::spawn({agent_e2e::fixture_path("e2e_locks"), "100000", "1", "1"},
                                        {.env = {{"LD_PRELOAD", agent_library()}}});
    // Past its start-up (the agent loaded, the loader consistent) once it has threads.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (test::task_tids(t.pid()).size() < 5 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(5ms);
    return t;
}

/// How one kill series goes: the command, its rounds, the random delay
/// before each kill, the target.
struct kill_series {
    const char* watch;
    int rounds;
    int min_delay_ms;
    int max_delay_ms;
    bool streams = false;
    test::child_process (*start_target)() = start_storm_with_agent;
    /// SIGTERM, SIGINT and SIGHUP in turn to tdctl instead of SIGKILLs:
    /// every round must end with 128+N and everything put back.
    bool ending_signals = false;
};

/// Random SIGKILLs of tdctl during `series.watch` on a storm with the agent,
/// attached with -p PID --agent: even rounds kill the tracer alone (the
/// first tdctl then puts the journal back: stop flags and, for --stream,
/// the streaming flag), odd ones both processes. No target may die.
void run_kill_series(const kill_series& series)
{
    std::mt19937 random(20261202);
    std::uniform_int_distribution<int> delay_ms(series.min_delay_ms, series.max_delay_ms);
    auto target = series.start_target();
    std::uint64_t flags = agent_symbol(target.pid(), "__tdagent_stop_signals");
    std::uint64_t streaming = agent_symbol(target.pid(), "__tdagent_streaming");
    auto streaming_on = [&] { return test::read_proc_mem(target.pid(), streaming, 1).at(0) != 0; };
    int deaths = 0, not_restored = 0, left_set = 0, rounds_with_stops = 0;
    std::string first_problem;
    for (int round = 0; round < series.rounds; ++round) {
        CAPTURE(round);
        bool both = round % 2 == 1;
        auto tdctl = test::child_process::spawn(
            {test::tdctl_path(), "--json", "-p", std::to_string(target.pid()), "--agent", "-e", series.watch});
        if (!await_attached(tdctl)) {
            // What tdctl was doing: its own words, and whether it still runs.
            auto status = tdctl.wait_exit(0ms);
            FAIL_CHECK("no attached record within 10 s; tdctl ", status ? status->describe() : "still running",
                       "; stderr: ", tdctl.stderr_text(), "; stdout: ", tdctl.stdout_text());
            REQUIRE(status.has_value());
        }
        pid_t tracer = tracer_of(tdctl);
        REQUIRE(tracer > 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(random)));
        rounds_with_stops += stop_flags_set(target.pid(), flags) > 0;
        if (series.ending_signals) {
            const int sig = std::array{SIGTERM, SIGINT, SIGHUP}[static_cast<std::size_t>(round % 3)];
            REQUIRE(::kill(tdctl.pid(), sig) == 0);
            auto status = tdctl.wait_exit(10s);
            if ((!status || status->exit_code() != 128 + sig) && first_problem.empty())
                first_problem = fmt::format("round {}: signal {}: tdctl {}", round, sig,
                                            status ? status->describe() : "still running");
            not_restored += !status || status->exit_code() != 128 + sig;
            both = false;  // everything must be put back
        } else {
            if (both)
                REQUIRE(::kill(tdctl.pid(), SIGKILL) == 0);
            REQUIRE(::kill(tracer, SIGKILL) == 0);
            (void)tdctl.wait_exit(5s);
        }
        std::this_thread::sleep_for(150ms);
        if (target.wait_exit(0ms)) {
            ++deaths;
            if (first_problem.empty())
                first_problem = fmt::format("round {}: the target died ({})", round, target.describe());
            target = series.start_target();
            flags = agent_symbol(target.pid(), "__tdagent_stop_signals");
            streaming = agent_symbol(target.pid(), "__tdagent_streaming");
            continue;
        }
        int set = stop_flags_set(target.pid(), flags) + (streaming_on() ? 1 : 0);
        if (!both && set != 0) {
            ++not_restored;
            if (first_problem.empty())
                first_problem = fmt::format("round {}: {} flags still set after the tracer's death", round, set);
        }
        left_set += both && set != 0;
    }
    if (series.ending_signals)
        MESSAGE(fmt::format("{}: {} deaths in {} rounds of SIGTERM, SIGINT or SIGHUP; {} rounds with stops planted "
                            "at the signal; rounds not ended with 128+N or not put back: {}",
                            series.watch, deaths, series.rounds, rounds_with_stops, not_restored));
    else
        MESSAGE(fmt::format("{}: {} deaths in {} kills; {} rounds with stops planted at the kill; flags left set by "
                            "the {} kills of both processes: {}",
                            series.watch, deaths, series.rounds, rounds_with_stops, series.rounds / 2, left_set));
    CHECK_MESSAGE(deaths == 0, first_problem);
    CHECK_MESSAGE(not_restored == 0, first_problem);
    CHECK(rounds_with_stops >= series.rounds * 9 / 10);
    if (!series.ending_signals && !target.wait_exit(0ms)) {
        // The last round killed both processes: nothing put the flags back.
        // The agent turns reporting off by itself: streaming once the
        // heartbeat is a second old, and, finding no tracer then (or a
        // stop's message not consumed), the global event mask and the stop
        // flags, so the program runs at full speed again. Before, the stop
        // flags stayed set and every report raised a signal nobody took.
        std::uint64_t global = agent_symbol(target.pid(), "__tdagent_threads_events");
        auto armed = [&] {
            auto mask = test::read_proc_mem(target.pid(), global, 8);
            return streaming_on() || stop_flags_set(target.pid(), flags) != 0 ||
                   std::any_of(mask.begin(), mask.end(), [](std::uint8_t b) { return b != 0; });
        };
        const auto killed = std::chrono::steady_clock::now();
        while (armed() && std::chrono::steady_clock::now() - killed < 5s)
            std::this_thread::sleep_for(20ms);
        CHECK_MESSAGE(!armed(), "streaming, a stop flag or the global mask still set 5 s after the kill");
        MESSAGE(fmt::format("{}: reporting off {} ms after the last kill of both processes", series.watch,
                            std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - killed)
                                .count()));
    }

    // A clean session after all that resets whatever the last kill left.
    auto last = test::run_command({test::tdctl_path(), "-p", std::to_string(target.pid()), "--agent", "-e",
                                   "watch all --for 0.2"},
                                  60s);
    CHECK_MESSAGE(last.status.exit_code() == 0, last.describe());
    CHECK(stop_flags_set(target.pid(), flags) == 0);
    CHECK_FALSE(streaming_on());
    CHECK_FALSE(target.wait_exit(0ms));
    CHECK(target.send_signal(SIGKILL));
}

}  // namespace

TEST_CASE("100 SIGKILLs of tdctl during watch --stop on a storm with the agent: no target dies")
{
    run_kill_series({"watch all --stop --for 20", 100, 50, 600});
}

TEST_CASE("100 SIGKILLs of tdctl during watch --stream on a storm: no target dies, streaming is put back")
{
    // The stop flags stay planted for the fallback; the streaming flag is
    // one more journaled byte.
    run_kill_series({"watch all --stream --for 20", 100, 20, 300, true});
}

TEST_CASE("100 SIGKILLs of tdctl during locks --stream on contending threads: no target dies, streaming is put back")
{
    run_kill_series({"locks --stream --for 20", 100, 20, 300, true, start_lock_contention_with_agent});
}

TEST_CASE("100 SIGTERM/SIGINT/SIGHUP during watch --stream on a storm: exit 128+N, streaming and stops put back")
{
    run_kill_series({"watch all --stream --for 20", 100, 20, 300, true, start_storm_with_agent, true});
}

namespace {

/// The signals fixture sending itself 300 SIGURGs (caught, each counted)
/// while one of its threads keeps creating threads, so its reports keep
/// stopping it: under `watch all` with the agent, every SIGURG must reach the
/// handler. Returns the stop signal tdctl wrote into TD_CREATE's flag.
int urgent_signals_under_watch(bool handler_after_start)
{
    test::temp_file record("signals-urg");
    std::vector<std::pair<std::string, std::string>> env = {{"LD_PRELOAD", agent_library()},
                                                            {"SIGNALS_SIGNO", std::to_string(SIGURG)}};
    if (handler_after_start)
        env.emplace_back("SIGNALS_HANDLER_AFTER_START", "1");
    auto target = test::child_process::spawn(
        {test::fixture_path("signals"), "--record", record.path(), "--wait-start", "300"}, {.env = env});
    REQUIRE(target.require_line(10s) == fmt::format("ready {}", target.pid()));
    std::uint64_t flags = agent_symbol(target.pid(), "__tdagent_stop_signals");
    auto tdctl = test::child_process::spawn(
        {test::tdctl_path(), "--json", "-p", std::to_string(target.pid()), "--agent", "-e", "watch all --for 60"});
    REQUIRE_MESSAGE(await_attached(tdctl), tdctl.describe());
    std::this_thread::sleep_for(300ms);
    auto bytes = test::read_proc_mem(target.pid(), flags, 16);
    REQUIRE(bytes.size() == 16);
    REQUIRE(target.write_stdin("x"));
    // tdctl's output is read as it comes (a pipe nobody reads holds the
    // tracer, and with it the target).
    bool saw_create = false;
    std::optional<test::exit_status> status;
    for (auto deadline = std::chrono::steady_clock::now() + 60s;
         !status && std::chrono::steady_clock::now() < deadline; status = target.wait_exit(0ms))
        while (auto line = tdctl.read_line(10ms))
            saw_create = saw_create || line->find("\"TD_CREATE\"") != std::string::npos;
    REQUIRE_MESSAGE(status, target.describe());
    CHECK_MESSAGE(status->exit_code() == 0, target.describe());
    auto facts = test::read_record(record.path());
    CHECK(test::count_kind(facts, "signal-sent") == 300);
    CHECK(test::count_kind(facts, "signal-got") == 300);
    // The target exited under `watch`: tdctl ends with it, having seen its reports.
    while (auto line = tdctl.read_line(100ms))
        saw_create = saw_create || line->find("\"TD_CREATE\"") != std::string::npos;
    CHECK(tdctl.wait_exit(30s));
    CHECK(saw_create);
    return bytes[TD_CREATE];
}

}  // namespace

TEST_CASE("a target that catches SIGURG: reports stop with SIGWINCH, and each of its SIGURGs reaches its handler")
{
    CHECK(urgent_signals_under_watch(false) == SIGWINCH);
}

namespace {

/// The forker's catch-signals children, as its record says: each exited 0.
void check_signal_catching_children(const std::string& record_path)
{
    auto facts = test::read_record(record_path);
    INFO("record: " << test::format_record(facts, 40));
    CHECK(test::count_kind(facts, "done") == 1);
    auto exits = test::facts_of_kind(facts, "child-exit");
    REQUIRE(exits.size() == 3);
    for (const auto& c : exits) {
        CAPTURE(c.line);
        CHECK_MESSAGE(c.number(1) == 0, "a forked child died: it met a byte tdctl planted");
    }
}

}  // namespace

// A forked child inherits the agent's reporting with the parent's memory (a
// shell's command substitution is one, as in pyenv's shims): it must never
// meet a byte tdctl planted. The forked child's copy of each signal-stop
// site got the stop flag's original byte written at the reporting
// function's own address, over its `ret`: a child that caught a signal ran
// into the int3 padding after it and died of SIGTRAP (10 runs of 10).
TEST_CASE("forked children that catch signals under the agent exit 0: launched and attached, 10 runs each")
{
    test::require_ptrace();
    SUBCASE("launched")
    {
        for (int round = 0; round < 10; ++round) {
            CAPTURE(round);
            test::temp_file record("agent-catch-signals");
            auto run = run_tdctl_agent({"watch all"},
                                       {test::fixture_path("forker"), "--record", record.path(), "catch-signals"});
            INFO(describe_run(run));
            REQUIRE(run.exit);
            CHECK((*run.exit)["status"] == 0);
            check_signal_catching_children(record.path());
            // Every SIGCHLD main's process caught was reported, whichever
            // thread caught it (one just born or ending, too).
            auto caught = test::facts_of_kind(test::read_record(record.path()), "caught-chld");
            REQUIRE(caught.size() == 1);
            CHECK(caught[0].number(0) == 3);
            const auto pid = (*run.launched)["pid"].get<pid_t>();
            auto sigchld_reports = std::count_if(run.events.begin(), run.events.end(), [&](const auto& e) {
                return e.event == "TD_CATCHSIG" && e.data == SIGCHLD && e.raw.value("pid", 0) == pid;
            });
            CHECK(sigchld_reports == caught[0].number(0));
            // Each report names its thread, one that ended before the drain too
            // (by the name its birth's entry carried).
            for (const auto& e : run.events) {
                CAPTURE(e.raw.dump());
                CHECK(!e.name.empty());
            }
        }
    }
    SUBCASE("attached")
    {
        for (int round = 0; round < 10; ++round) {
            CAPTURE(round);
            test::temp_file record("agent-catch-signals-attach");
            auto target = test::child_process::spawn(
                {test::fixture_path("forker"), "--record", record.path(), "--wait-start", "catch-signals"});
            REQUIRE(target.require_line(10s) == fmt::format("ready {}", target.pid()));
            auto tdctl = test::child_process::spawn(
                {test::tdctl_path(), "--json", "-p", std::to_string(target.pid()), "--agent", "-e", "watch all --for 60"});
            if (!await_attached(tdctl)) {
            // What tdctl was doing: its own words, and whether it still runs.
            auto status = tdctl.wait_exit(0ms);
            FAIL_CHECK("no attached record within 10 s; tdctl ", status ? status->describe() : "still running",
                       "; stderr: ", tdctl.stderr_text(), "; stdout: ", tdctl.stdout_text());
            REQUIRE(status.has_value());
        }
            REQUIRE(target.write_stdin("x"));
            std::optional<test::exit_status> status;
            // tdctl's output is read as it comes: a pipe nobody reads holds the target.
            for (auto deadline = std::chrono::steady_clock::now() + 60s;
                 !status && std::chrono::steady_clock::now() < deadline; status = target.wait_exit(0ms))
                while (tdctl.read_line(10ms)) {
                }
            REQUIRE_MESSAGE(status, target.describe());
            CHECK_MESSAGE(status->exit_code() == 0, target.describe());
            while (tdctl.read_line(100ms)) {
            }
            CHECK(tdctl.wait_exit(30s));
            check_signal_catching_children(record.path());
        }
    }
}
