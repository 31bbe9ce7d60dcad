// Do no harm (SPEC §9): the target survives whatever tdctl does and whatever
// happens to tdctl, and tdctl neither crashes nor hangs. Each case repeats
// a racy scenario many times (at least 100, or 15 rounds of 1000 signals).
#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <sstream>
#include <optional>
#include <thread>
#include <unistd.h>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"

#include "tests/integration/integration_support.hpp"
#include "tests/support/proc.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

/// A storm fixture that runs until killed: two creators each start a thread
/// every 0.5 ms, plus a detached and a joinable chain of threads that create
/// their successors and end. `program`: the fixture, or a link to it.
child_process start_storm(const std::string& program = fixture_path("storm"))
{
    auto target = child_process::spawn({program, "--wait-start", "0"});
    REQUIRE(target.require_line(10s) == fmt::format("ready {}", target.pid()));
    REQUIRE(target.write_stdin("x"));
    // Let the storm reach its pace before the first attach.
    std::this_thread::sleep_for(200ms);
    return target;
}

/// The storm fixture under another name, so the kernel log's lines about its
/// threads (which name the thread's comm, not the process) are told apart
/// from those of other tests' targets.
std::string storm_named(const std::string& comm)
{
    auto link = std::filesystem::temp_directory_path() / fmt::format("{}-{}", comm, ::getpid());
    std::filesystem::remove(link);
    std::filesystem::create_symlink(fixture_path("storm"), link);
    return link.string();
}

/// Kernel log lines saying a thread with this comm died on an int3
/// ("traps: COMM[TID] trap int3 ip:..."), or std::nullopt when the log
/// cannot be read here.
std::optional<std::size_t> kernel_int3_traps(const std::string& comm)
{
    auto r = run_command({"dmesg"}, 10s);
    if (!r.status.is_success())
        return std::nullopt;
    std::size_t n = 0;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
        if (line.find("trap int3") != std::string::npos && line.find(" " + comm.substr(0, 15) + "[") != std::string::npos)
            ++n;
    return n;
}

/// Tasks of pid that are still traced or in a tracing stop ('t').
std::string traced_leftovers(pid_t pid)
{
    return traced_tasks(pid, "t");
}

/// The state tdctl changes in an nptl target and must put back: both
/// reporting functions' first two bytes, compared with libc's file on disk,
/// and the global event mask, which must be empty (the fixtures never set
/// it). Addresses and file bytes are looked up once, so that checking again
/// costs three small reads.
struct nptl_state {
    pid_t pid = 0;
    std::string problem;   // set when the lookup failed
    std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> code;   // address, bytes in the file
    std::uint64_t mask = 0;

    static nptl_state of(pid_t pid)
    {
        nptl_state s;
        s.pid = pid;
        try {
            auto libc = find_module(pid, "libc.so.6");
            for (const char* name : {"__nptl_create_event", "__nptl_death_event"}) {
                auto address = libc.address_of(name);
                auto offset = file_offset_of(pid, address);
                if (!offset) {
                    s.problem = fmt::format("{} is not mapped from a file", name);
                    return s;
                }
                s.code.emplace_back(address, read_file_bytes(libc.mapped_path, *offset, 2));
            }
            s.mask = libc.address_of("__nptl_threads_events");
        } catch (const std::exception& e) {
            s.problem = e.what();
        }
        return s;
    }

    /// Empty when all is as before tdctl; else what differs.
    std::string changes_left() const
    {
        if (!problem.empty())
            return problem;
        try {
            std::string out;
            for (const auto& [address, file] : code)
                if (auto live = read_proc_mem(pid, address, 2); live != file)
                    out += fmt::format("{:#x}: {} in memory, {} in the file; ", address, hex_bytes(live),
                                       hex_bytes(file));
            auto m = read_proc_mem(pid, mask, sizeof(td_thr_events_t));
            if (m != std::vector<std::uint8_t>(sizeof(td_thr_events_t), 0))
                out += fmt::format("global mask {}; ", hex_bytes(m));
            return out;
        } catch (const std::exception& e) {
            return e.what();
        }
    }
};

std::string nptl_changes_left(pid_t pid)
{
    return nptl_state::of(pid).changes_left();
}

/// The first JSON record of a type on tdctl's stdout, waiting at most timeout.
std::optional<json> await_record(child_process& tdctl, std::string_view type, milliseconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        auto line = tdctl.read_line(std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()));
        if (!line)
            return std::nullopt;
        auto rec = json::parse(*line, nullptr, false);
        if (!rec.is_discarded() && rec.value("type", "") == type)
            return rec;
    }
    return std::nullopt;
}

/// What kill_tracer_rounds() does each round: tdctl attaches with
/// `commands` (and is sent `stdin_lines`, read as commands from a pipe that
/// stays open), the test waits for a record of type `wait_for`, sleeps a random
/// delay in [delay_ms.first, delay_ms.second] and SIGKILLs the tracer process
/// (the child of the tdctl the user started).
struct tracer_kill_plan {
    int rounds = 0;
    std::vector<std::string> commands;
    std::string stdin_lines;
    std::string wait_for = "attached";
    std::pair<int, int> delay_ms;
};

/// What the rounds saw: targets that died, survivors not restored (or not
/// free of tracers) within 2 s of the kill, the slowest restore of a
/// survivor (ms) and the first problem in words.
struct tracer_kill_result {
    int deaths = 0;
    int leftovers = 0;
    double slowest_ms = 0;
    std::string first_problem;
};

/// Runs plan.rounds SIGKILLs of the tracer on targets from start_target()
/// (a new one after each death); the last target is killed at the end.
template <class Start>
tracer_kill_result kill_tracer_rounds(const tracer_kill_plan& plan, Start start_target, unsigned seed)
{
    tracer_kill_result seen;
    std::mt19937 random(seed);
    auto target = start_target();
    auto state = nptl_state::of(target.pid());
    for (int round = 0; round < plan.rounds; ++round) {
        CAPTURE(round);
        std::vector<std::string> args = {tdctl_path(), "--json", "-p", std::to_string(target.pid())};
        args.insert(args.end(), plan.commands.begin(), plan.commands.end());
        auto tdctl = child_process::spawn(args);
        if (!plan.stdin_lines.empty())
            REQUIRE(tdctl.write_stdin(plan.stdin_lines));
        REQUIRE_MESSAGE(await_record(tdctl, plan.wait_for, 10s), tdctl.describe());
        auto children = read_text_file(fmt::format("/proc/{0}/task/{0}/children", tdctl.pid())).value_or("");
        pid_t tracer = static_cast<pid_t>(std::strtol(children.c_str(), nullptr, 10));
        REQUIRE(tracer > 0);
        std::uniform_int_distribution<int> delay(plan.delay_ms.first, plan.delay_ms.second);
        std::this_thread::sleep_for(std::chrono::milliseconds(delay(random)));
        REQUIRE(::kill(tracer, SIGKILL) == 0);
        auto killed_at = std::chrono::steady_clock::now();
        bool clean = wait_until(
            [&] {
                while (tdctl.read_line(0ms)) {
                }
                return state.changes_left().empty() && traced_leftovers(target.pid()).empty();
            },
            2s, 1ms);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed_at).count();
        auto status = tdctl.wait_exit(5s);
        CHECK((status && status->exit_code() == 128 + SIGKILL));
        std::this_thread::sleep_for(100ms);
        if (target.wait_exit(0ms)) {
            ++seen.deaths;
            if (seen.first_problem.empty())
                seen.first_problem = fmt::format("round {}: the target died ({})", round, target.describe());
            target = start_target();
            state = nptl_state::of(target.pid());
            continue;
        }
        seen.slowest_ms = std::max(seen.slowest_ms, ms);
        // The restore's time is reported, not bounded: on a loaded host the
        // guardian is scheduled late (a bound of 100 ms failed at load 10).
        if (!clean) {
            ++seen.leftovers;
            if (seen.first_problem.empty())
                seen.first_problem = fmt::format("round {}: {:.1f} ms; left: {} {}; tdctl: {}", round, ms,
                                                 traced_leftovers(target.pid()), nptl_changes_left(target.pid()),
                                                 tdctl.stderr_text());
        }
    }
    CHECK(target.send_signal(SIGKILL));
    return seen;
}

}  // namespace

TEST_SUITE("do no harm")
{
    // A byte may be planted only once every thread that can reach it is
    // traced. Threads created by threads that were not seized yet (the
    // kernel decides at clone() time whether the child is traced) used to
    // run untraced into the planted int3 and kill the target with SIGTRAP,
    // in about 1 attach in 6 on this storm.
    TEST_CASE("100 attaches with watch and detach on a thread storm: the target never dies")
    {
        require_attach();
        constexpr int rounds = 100;
        int deaths = 0;
        int bad_runs = 0;
        std::string first_problem;
        const std::string comm = "stormattach";
        const std::string program = storm_named(comm);
        auto traps_before = kernel_int3_traps(comm);
        auto target = start_storm(program);
        for (int round = 0; round < rounds; ++round) {
            auto run = run_tdctl({"-p", std::to_string(target.pid()), "-e", "watch --for 0.3"}, 30s);
            auto died = target.wait_exit(0ms);
            bool untraced = tracer_pid(target.pid()).value_or(0) == 0;
            if (died || !run.result.status.is_success() || !untraced) {
                if (first_problem.empty())
                    first_problem = fmt::format("round {}: target {}; traced after detach: {}\n{}", round,
                                                died ? died->describe() : "alive", !untraced, run.describe());
                if (died) {
                    ++deaths;
                    target = start_storm(program);
                } else {
                    ++bad_runs;
                }
            }
        }
        CHECK_MESSAGE(deaths == 0, deaths << " target deaths in " << rounds << " rounds; first: " << first_problem);
        CHECK_MESSAGE(bad_runs == 0, bad_runs << " bad tdctl runs in " << rounds << "; first: " << first_problem);
        CHECK(target.send_signal(SIGKILL));
        if (auto traps_after = kernel_int3_traps(comm); traps_before && traps_after)
            CHECK_MESSAGE(*traps_after == *traps_before, "kernel log: " << *traps_after - *traps_before
                                                                        << " threads of the target died on an int3");
        else
            MESSAGE("the kernel log cannot be read here: its int3 lines are not checked");
        std::filesystem::remove(program);
    }

    // A thread blocked in vfork() cannot stop until its child execs or
    // exits. attach used to wait 10 s for it and fail ("tasks did not stop
    // within 10 s"), leaving tasks traced and stopped. It is held by
    // construction (it stops before running any code of its own), so attach
    // goes on without it and events work for the other threads.
    TEST_CASE("attach while a thread is blocked in vfork: 10 of 10 attaches work and leave nothing traced")
    {
        require_attach();
        temp_file record("vforker-record");
        auto target = child_process::spawn({fixture_path("vforker"), "--record", record.path(), "120"});
        REQUIRE(wait_until([&] { return count_kind(parse_record(read_text_file(record.path()).value_or("")),
                                                   "fork") == 1; },
                           10s));
        for (int round = 0; round < 10; ++round) {
            CAPTURE(round);
            auto run = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", "threads", "-e",
                                  "watch --for 0.3"},
                                 20s);
            INFO(run.describe());
            REQUIRE(run.result.status.exit_code() == 0);
            CHECK(!run.events("TD_CREATE").empty());
            CHECK(traced_leftovers(target.pid()).empty());
            REQUIRE(!target.wait_exit(0ms));
        }
        auto facts = parse_record(read_text_file(record.path()).value_or(""));
        CHECK(count_kind(facts, "child-exit") == 0);  // the vfork was in progress throughout
        CHECK(target.send_signal(SIGKILL));
    }

    // A signal to tdctl while it attaches (here to a process with many
    // threads, so that attach takes a while) is honoured at once: everything
    // seized is let go, nothing is left traced or stopped, and the exit
    // status says which signal ended tdctl.
    TEST_CASE("SIGTERM at a random moment of an attach: tdctl ends with 143 and leaves nothing traced")
    {
        require_attach();
        temp_file record("sleeper-record");
        auto target = start_fixture("sleeper", {"--record", record.path(), "1500"}, record.path());
        std::mt19937 random(12345);
        for (int round = 0; round < 20; ++round) {
            auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 150000)(random));
            CAPTURE(round);
            CAPTURE(delay.count());
            auto tdctl = child_process::spawn({tdctl_path(), "-p", std::to_string(target.pid()), "-e", "threads",
                                               "-e", "watch --for 5"});
            std::this_thread::sleep_for(delay);
            REQUIRE(tdctl.send_signal(SIGTERM));
            auto status = tdctl.wait_exit(5s);
            REQUIRE_MESSAGE(status, "tdctl did not end within 5 s of SIGTERM");
            INFO(tdctl.stderr_text());
            // Before its handler is set up, SIGTERM ends tdctl by default, and
            // nothing was touched yet.
            CHECK((status->exit_code() == 128 + SIGTERM || (status->is_signaled() && status->term_signal() == SIGTERM)));
            CHECK(wait_until([&] { return traced_leftovers(target.pid()).empty(); }, 2s));
            REQUIRE(!target.wait_exit(0ms));
        }
    }

    // SIGKILL of tdctl (kill -9, a job runner, the OOM killer). The process
    // the user started is not the tracer: its death reaches the tracer as a
    // hangup, which ends in a clean detach. Before, a thread sitting in a
    // SIGTRAP stop when its tracer died took the SIGTRAP (and an int3 left in
    // libc killed the next thread to reach it): the target died in 20 of 20
    // attach tries and 10 of 10 launch tries.
    TEST_CASE("50 SIGKILLs of tdctl at random moments: the target lives and is put back as it was")
    {
        require_attach();
        constexpr int rounds = 50;
        std::mt19937 random(4242);
        int deaths = 0, leftovers = 0;
        double slowest_ms = 0;
        std::string first_problem;
        auto target = start_storm();
        for (int round = 0; round < rounds; ++round) {
            const int scenario = round % 3;  // 0: attach + watch, 1: launch + watch, 2: attach + stop (held)
            auto delay = std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 1000)(random));
            CAPTURE(round);
            CAPTURE(scenario);
            pid_t victim = target.pid();
            std::optional<child_process> tdctl;
            if (scenario == 1) {
                // With -o, not stderr, the records of a launch.
                tdctl = child_process::spawn(
                    {tdctl_path(), "--json", "-o", "/dev/stdout", "--", fixture_path("storm"), "0"});
                auto launched = await_record(*tdctl, "launched", 10s);
                REQUIRE_MESSAGE(launched, tdctl->describe());
                victim = static_cast<pid_t>(int_field(*launched, "pid"));
            } else {
                std::vector<std::string> args = {tdctl_path(), "--json", "-p", std::to_string(victim)};
                if (scenario == 0)
                    args.insert(args.end(), {"-e", "watch --for 20"});
                else
                    args.insert(args.end(), {"-e", "event set create", "-e", "event enable on all", "-e",
                                             "stop create", "-e", "sleep 20"});
                tdctl = child_process::spawn(args);
                REQUIRE_MESSAGE(await_record(*tdctl, "attached", 10s), tdctl->describe());
                if (scenario == 2) {
                    REQUIRE_MESSAGE(await_record(*tdctl, "stopped", 10s), tdctl->describe());
                    delay = std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 200)(random));
                }
            }
            auto state = nptl_state::of(victim);
            std::this_thread::sleep_for(delay);
            REQUIRE(tdctl->send_signal(SIGKILL));
            auto killed_at = std::chrono::steady_clock::now();
            // The reader of tdctl's output lives on (a terminal, a pipe):
            // keep reading it, or the tracer blocks on a full pipe.
            bool clean = wait_until(
                [&] {
                    while (tdctl->read_line(0ms)) {
                    }
                    return state.changes_left().empty() && traced_leftovers(victim).empty();
                },
                3s, 1ms);
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed_at).count();
            slowest_ms = std::max(slowest_ms, ms);
            // A left int3 or a thread woken with SIGTRAP kills the storm at once.
            std::this_thread::sleep_for(100ms);
            bool alive = scenario == 1 ? proc_state(victim).value_or('X') != 'Z' && proc_state(victim).has_value()
                                       : !target.wait_exit(0ms);
            if (!alive || !clean) {
                auto what = fmt::format("round {} (scenario {}, kill after {} ms): target {}; left: {} {}", round,
                                        scenario, delay.count(), alive ? "alive" : "dead", traced_leftovers(victim),
                                        alive ? nptl_changes_left(victim) : "");
                if (first_problem.empty())
                    first_problem = what;
                deaths += alive ? 0 : 1;
                leftovers += clean ? 0 : 1;
            }
            if (scenario == 1)
                ::kill(victim, SIGKILL);
            else if (!alive)
                target = start_storm();
            tdctl->wait_exit(5s);
        }
        MESSAGE(fmt::format("slowest restore after SIGKILL: {:.1f} ms", slowest_ms));
        CHECK_MESSAGE(deaths == 0, deaths << " target deaths in " << rounds << "; first: " << first_problem);
        CHECK_MESSAGE(leftovers == 0, leftovers << " rounds left changes; first: " << first_problem);
        CHECK(target.send_signal(SIGKILL));
    }

    // SIGKILL of the tracer process itself (found as the child of the tdctl
    // the user started). Every change was journaled in a block shared with
    // that first process before it was made; the kernel wakes it through a
    // robust mutex the tracer held as the tracer's memory goes, before the
    // tracees are let go, and it writes the originals back. Before, the int3
    // bytes stayed in libc and the target died at its next thread creation
    // (10 of 10). What remains: a thread stopped at a reporting address at
    // the instant of the kill takes SIGTRAP (README, Limits); the death rate
    // is printed, and at least half the targets must live.
    TEST_CASE("40 SIGKILLs of the tracer process: the bytes and the mask are put back")
    {
        require_attach();
        auto start_quiet = [] {
            // Two creators, a thread every 20 ms each.
            auto t = child_process::spawn({fixture_path("storm"), "--wait-start", "0", "20"});
            REQUIRE(t.require_line(10s) == fmt::format("ready {}", t.pid()));
            REQUIRE(t.write_stdin("x"));
            return t;
        };
        tracer_kill_plan plan;
        plan.rounds = 40;
        plan.commands = {"-e", "watch --for 20"};
        plan.delay_ms = {50, 600};
        auto seen = kill_tracer_rounds(plan, start_quiet, 777);
        MESSAGE(fmt::format("tracer SIGKILLs during watch: {} target deaths in {}; slowest restore {:.1f} ms",
                            seen.deaths, plan.rounds, seen.slowest_ms));
        CHECK_MESSAGE(seen.deaths <= plan.rounds / 2, seen.deaths << " target deaths in " << plan.rounds);
        CHECK_MESSAGE(seen.leftovers == 0, seen.leftovers << " surviving targets not restored within 2 s; first: "
                                                          << seen.first_problem);
    }

    // SIGKILL of the tracer while `stop` holds the target (commands read
    // from a pipe that stays open: the target stays held). The reporter (and
    // any thread that trapped while the others were being stopped) sat in
    // the SIGTRAP stop of its hit, and woken by the tracer's death took that
    // SIGTRAP; the threads let go ran into the int3 bytes before the
    // guardian could put them back: the target died in 6 of 10 tries. Held
    // threads are now in PTRACE_EVENT_STOPs, which carry no signal, and the
    // code is put back for as long as the hold lasts.
    TEST_CASE("SIGKILL of the tracer while stop holds a storm: 30 of 30 targets live and are put back")
    {
        require_attach();
        tracer_kill_plan plan;
        plan.rounds = 30;
        plan.stdin_lines = "event set create,death\nevent enable on all\nstop create,death\n";
        plan.wait_for = "stopped";
        plan.delay_ms = {0, 200};
        auto seen = kill_tracer_rounds(plan, [] { return start_storm(); }, 31337);
        MESSAGE(fmt::format("tracer SIGKILLs during stop: {} target deaths in {}; slowest restore {:.1f} ms",
                            seen.deaths, plan.rounds, seen.slowest_ms));
        CHECK_MESSAGE(seen.deaths == 0, seen.deaths << " target deaths in " << plan.rounds << "; first: "
                                                    << seen.first_problem);
        CHECK_MESSAGE(seen.leftovers == 0, seen.leftovers << " surviving targets not restored within 2 s; first: "
                                                          << seen.first_problem);
    }

    // SIGTERM, SIGINT or SIGHUP at a random moment of a watch on a storm
    // (attach included): a clean detach every time, exit 128+N, and the
    // reporting bytes, the global mask, the message list head, ld.so's
    // initial-report flag and the creators' event fields exactly as before.
    TEST_CASE("100 random SIGTERM/SIGINT/SIGHUP during watch on a storm: state as before, exit 128+N")
    {
        require_attach();
        constexpr int rounds = 100;
        constexpr int signals[] = {SIGTERM, SIGINT, SIGHUP};
        std::mt19937 random(777);
        temp_file record("storm-record");
        auto target = child_process::spawn({fixture_path("storm"), "--record", record.path(), "0"});
        std::vector<std::uint64_t> creators;
        REQUIRE(wait_until(
            [&] {
                creators.clear();
                for (const auto& f : facts_of_kind(parse_record(read_text_file(record.path()).value_or("")), "thread"))
                    creators.push_back(f.handle());
                return creators.size() == 2;
            },
            10s));
        const auto regions = nptl_regions(target.pid(), creators);
        const auto before = take_snapshot(target.pid(), regions);
        int problems = 0;
        std::string first;
        for (int round = 0; round < rounds; ++round) {
            const int sig = signals[round % 3];
            auto delay = std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 1000)(random));
            auto tdctl = child_process::spawn({tdctl_path(), "-p", std::to_string(target.pid()), "-e", "watch --for 20"});
            // Read the output as a terminal would, so the tracer never blocks on it.
            auto until = std::chrono::steady_clock::now() + delay;
            bool spoke = false;
            while (std::chrono::steady_clock::now() < until)
                if (tdctl.read_line(std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now())))
                    spoke = true;
            REQUIRE(tdctl.send_signal(sig));
            auto status = tdctl.wait_exit(10s);
            // A signal that comes while the loader is still mapping tdctl's
            // libraries (before main's first line, which blocks it; seen once
            // in 100 under a load of 8) ends tdctl by the default action
            // before it has done anything: a shell reports that as 128+N too.
            bool before_start = status && !spoke && status->is_signaled() && status->term_signal() == sig;
            auto died = target.wait_exit(0ms);
            std::string diff = died ? "" : snapshot_difference(before, take_snapshot(target.pid(), regions));
            std::string left = died ? "" : traced_leftovers(target.pid());
            bool ok = status && (status->exit_code() == 128 + sig || before_start) && !died && diff.empty() &&
                      left.empty();
            if (!ok) {
                ++problems;
                if (first.empty())
                    first = fmt::format("round {}: signal {} after {} ms: tdctl {}; target {}; changed: {}; traced: "
                                        "{}; stderr: {}",
                                        round, sig, delay.count(), status ? status->describe() : "still running",
                                        died ? died->describe() : "alive", diff, left, tdctl.stderr_text());
                if (died)
                    break;
            }
        }
        CHECK_MESSAGE(problems == 0, problems << " bad rounds of " << rounds << "; first: " << first);
        CHECK(target.send_signal(SIGKILL));
    }

    // While a run waits on a quiet target, the tracer sleeps in a blocking
    // waitpid() that only the waker thread can end (no stop will come). A
    // wake lost between the tracer's last look at the signals and its
    // waitpid() would leave tdctl deaf to the signal for good.
    TEST_CASE("100 random SIGTERM/SIGINT/SIGHUP during watch on an idle target: each ends tdctl within 1 s")
    {
        require_attach();
        constexpr int rounds = 100;
        constexpr int signals[] = {SIGTERM, SIGINT, SIGHUP};
        std::mt19937 random(2026);
        auto target = child_process::spawn({fixture_path("sleeper"), "4"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 5; }, 10s));
        int problems = 0;
        double slowest_ms = 0;
        std::string first;
        for (int round = 0; round < rounds; ++round) {
            const int sig = signals[round % 3];
            auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(target.pid()), "-e",
                                               round % 2 == 0 ? "watch" : "sleep 100"});
            REQUIRE_MESSAGE(await_record(tdctl, "attached", 10s), tdctl.describe());
            std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 100000)(random)));
            REQUIRE(tdctl.send_signal(sig));
            auto sent = std::chrono::steady_clock::now();
            auto status = tdctl.wait_exit(5s);
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
            slowest_ms = std::max(slowest_ms, ms);
            auto died = target.wait_exit(0ms);
            std::string left = died ? "" : traced_leftovers(target.pid());
            bool ok = status && status->exit_code() == 128 + sig && ms < 1000 && !died && left.empty();
            if (!ok) {
                ++problems;
                if (first.empty())
                    first = fmt::format("round {}: signal {}: tdctl {} after {:.0f} ms; target {}; traced: {}; "
                                        "stderr: {}",
                                        round, sig, status ? status->describe() : "still running", ms,
                                        died ? died->describe() : "alive", left, tdctl.stderr_text());
                if (died)
                    break;
            }
        }
        MESSAGE("slowest end after the signal: " << slowest_ms << " ms");
        CHECK_MESSAGE(problems == 0, problems << " bad rounds of " << rounds << "; first: " << first);
        CHECK(target.send_signal(SIGKILL));
    }

    TEST_CASE("watch --for 0.05 on an idle target ends on time, 20 of 20 (only the waker can end its wait)")
    {
        require_attach();
        auto target = child_process::spawn({fixture_path("sleeper"), "2"});
        REQUIRE(wait_until([&] { return task_tids(target.pid()).size() == 3; }, 10s));
        for (int round = 0; round < 20; ++round) {
            CAPTURE(round);
            auto start = std::chrono::steady_clock::now();
            auto run = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", "watch --for 0.05"}, 10s);
            double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            INFO(run.describe());
            auto ends = run.of_type("watch_end");
            REQUIRE(ends.size() == 1);
            CHECK(ends[0].value("reason", "") == "duration");
            CHECK(took < 2.0);
        }
        CHECK(traced_leftovers(target.pid()).empty());
        CHECK(target.send_signal(SIGKILL));
    }

    // Deadlines hold however stops arrive. With each waitpid() 20 ms slow
    // (a badly loaded host), `watch --for 2` on a storm never ended: one
    // pump took 512 stops before the deadline was looked at again.
    TEST_CASE("every waitpid 20 ms slow: watch --for 2 on a storm ends on time and detaches cleanly")
    {
        require_attach();
        auto target = start_storm();
        run_options slow;
        slow.env = {{"LD_PRELOAD", SLOW_WAIT_SHIM}, {"TDCTL_SHIM_WAIT", "delay"}};
        // Each round runs the same session without the shim first: the
        // bounds below are taken against it, so a loaded host slows both.
        double fastest_plain = 1e9, fastest_slow = 1e9;
        for (int round = 0; round < 3; ++round) {
            CAPTURE(round);
            for (bool shimmed : {false, true}) {
                auto start = std::chrono::steady_clock::now();
                auto run = run_tdctl({"-p", std::to_string(target.pid()), "-e", "watch --for 2"}, 60s,
                                     shimmed ? slow : run_options{});
                double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                INFO(run.describe());
                CHECK(run.result.status.exit_code() == 0);
                CHECK(run.result.out.find("watch:") != std::string::npos);
                // The deadline holds: it once took more than a minute.
                CHECK(seconds < 12.0);
                CHECK(traced_leftovers(target.pid()).empty());
                CHECK(nptl_changes_left(target.pid()).empty());
                REQUIRE(!target.wait_exit(0ms));
                double& fastest = shimmed ? fastest_slow : fastest_plain;
                fastest = std::min(fastest, seconds);
            }
        }
        MESSAGE(fmt::format("watch --for 2, fastest of 3: {:.2f} s with every waitpid 20 ms slow, {:.2f} s without",
                            fastest_slow, fastest_plain));
        // Then it took 3.2-3.4 s, about 1.2 s more than without the shim:
        // detach's stop-all took each of ~45 threads' stops with its own
        // 20 ms waitpid(); now most are read with PTRACE_GETSIGINFO (0.2-0.3
        // s more than without the shim here).
        CHECK(fastest_slow - fastest_plain < 0.7);
        CHECK(target.send_signal(SIGKILL));
    }

    // A non-blocking waitpid() that reports a status only once per 100 ms
    // although one is waiting (GDB's attach-slow-waitpid case): the wait
    // loop must not rely on one SIGCHLD per status. attach used to take about
    // 10 s per thread and detach then blocked in poll() for ever.
    TEST_CASE("a WNOHANG waitpid that answers once per 100 ms: attach, threads and detach complete")
    {
        require_attach();
        temp_file record("sleeper-record");
        auto target = start_fixture("sleeper", {"--record", record.path(), "6"}, record.path());
        run_options sparse;
        sparse.env = {{"LD_PRELOAD", SLOW_WAIT_SHIM}, {"TDCTL_SHIM_WAIT", "sparse"}};
        auto start = std::chrono::steady_clock::now();
        auto run = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", "threads"}, 60s, sparse);
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        INFO(run.describe());
        MESSAGE(fmt::format("attach + threads + detach with a sparse waitpid took {:.2f} s", seconds));
        CHECK(run.result.status.exit_code() == 0);
        std::set<pid_t> listed;
        for (const auto& row : run.of_type("thread"))
            listed.insert(static_cast<pid_t>(int_field(row, "tid")));
        CHECK(listed == live_tids(target.pid()));
        CHECK(traced_leftovers(target.pid()).empty());
    }

    // `tdctl -- /lib64/ld-linux-x86-64.so.2 PROG`: at the loader's own entry
    // point libc is not mapped yet, and tdctl settled on "no thread library"
    // and reported nothing. It follows the loader's notifications now.
    TEST_CASE("launch through the dynamic loader named explicitly: every creation and death reported")
    {
        require_ptrace();
        const std::string loader = "/lib64/ld-linux-x86-64.so.2";
        REQUIRE_MESSAGE(::access(loader.c_str(), X_OK) == 0, loader << " is missing");
        temp_file record("loader-churn-record");
        const std::vector<std::string> program{loader, fixture_path("churn"), "--record", record.path(), "2", "3"};
        std::vector<std::string> args{"--json", "--"};
        std::string library_record = "launched";
        SUBCASE("ld.so PROG") {}
        // `env ... ld.so PROG`: the loader comes by an exec, not at launch
        // (tdctl said "thread library: none" at the exec and reported nothing).
        SUBCASE("env ld.so PROG")
        {
            args.insert(args.end(), {"env", "TDCTL_TEST=1"});
            library_record = "exec";
        }
        args.insert(args.end(), program.begin(), program.end());
        auto run = run_tdctl(args, 30s);
        INFO(run.describe());
        REQUIRE(run.result.status.exit_code() == 0);
        auto announced = run.of_type(library_record);
        REQUIRE(announced.size() == 1);
        CHECK(announced[0].value("backend", "") == "nptl");
        auto facts = parse_record(read_text_file(record.path()).value_or(""));
        auto expected = to_multiset(thread_tids(facts));
        CHECK(expected.size() == 8);
        CHECK(multiset_difference(expected, tid_multiset(run.events("TD_CREATE"))).empty());
        CHECK(multiset_difference(expected, tid_multiset(run.events("TD_DEATH"))).empty());
        CHECK(run.events("TD_CREATE").size() == expected.size());
        CHECK(run.events("TD_DEATH").size() == expected.size());
    }

    // The thread library reached through dlopen after tdctl is there: since
    // glibc 2.34 libpthread.so.0 is a stub and its functions are libc's, the
    // thread library every dynamic program has from the start (nothing can
    // call dlopen before libc is loaded). The load must disturb nothing:
    // every thread created through the dlopen'ed handle reported, launched
    // and attached.
    TEST_CASE("libpthread.so.0 opened with dlopen after tdctl came: every creation and death reported")
    {
        require_attach();
        constexpr int threads = 30;
        auto check = [&](const std::string& record_path, const std::vector<json>& creates,
                         const std::vector<json>& deaths) {
            auto text = read_text_file(record_path).value_or("");
            CHECK(text.find("\nopened\n") != std::string::npos);
            auto expected = to_multiset(thread_tids(parse_record(text)));
            CHECK(expected.size() == threads);
            CHECK_MESSAGE(multiset_difference(expected, tid_multiset(creates)).empty(), "TD_CREATE");
            CHECK_MESSAGE(multiset_difference(expected, tid_multiset(deaths)).empty(), "TD_DEATH");
            CHECK(creates.size() == threads);
            CHECK(deaths.size() == threads);
        };
        SUBCASE("launched")
        {
            temp_file record("dlopen-launch-record");
            auto run = run_tdctl({"--json", "--", fixture_path("dlopen_threads"), "--record", record.path(),
                                  std::to_string(threads)},
                                 30s);
            INFO(run.describe());
            REQUIRE(run.result.status.exit_code() == 0);
            check(record.path(), run.events("TD_CREATE"), run.events("TD_DEATH"));
        }
        SUBCASE("attached")
        {
            temp_file record("dlopen-attach-record");
            auto target = child_process::spawn({fixture_path("dlopen_threads"), "--record", record.path(),
                                                "--wait-start", std::to_string(threads)});
            const pid_t pid = target.pid();
            REQUIRE(target.require_line(10s) == fmt::format("ready {}", pid));
            auto tdctl = watch_then_go(target);
            auto status = tdctl.require_exit(30s);
            CHECK(target.require_exit(10s).is_success());
            INFO("tdctl stderr: " << tdctl.stderr_text());
            CHECK(status.exit_code() == 0);
            auto records = parse_records(tdctl.stdout_text());
            check(record.path(), event_records(records, "TD_CREATE"), event_records(records, "TD_DEATH"));
        }
    }

    // A launch reads the modules before the program runs; a library it
    // loads later held start routines tdctl printed as bare addresses (the
    // bt of the same thread named them).
    TEST_CASE("launched: a start routine in a library dlopen'ed later is named in TD_CREATE")
    {
        require_ptrace();
        constexpr int threads = 5;
        auto run = run_tdctl({"--json", "--", fixture_path("plugin_host"), fixture_path("libfx_plugin.so"),
                              std::to_string(threads)},
                             30s);
        INFO(run.describe());
        REQUIRE(run.result.status.exit_code() == 0);
        auto creates = run.events("TD_CREATE");
        REQUIRE(creates.size() == threads);
        for (const auto& e : creates)
            CHECK_MESSAGE((e.contains("startsym") && e["startsym"] == "fx_plugin_worker"), e.dump());
        bool summarized = false;
        for (const auto& r : run.of_type("summary_lifetime"))
            summarized = summarized || (r.value("symbol", "") == "fx_plugin_worker" &&
                                        r.value("module", "") == "libfx_plugin.so");
        CHECK(summarized);
    }

    // The target must never die because of the controller (SPEC §9). A
    // detach while threads are being created and joined, right after
    // `watch --count N` ends, sometimes kills it: with SIGTRAP (a thread
    // that executed the int3 but whose trap was not handled as a breakpoint
    // gets the SIGTRAP delivered) or with SIGABRT "The futex facility
    // returned an unexpected error code" (a thread resumed at
    // __nptl_death_event+1 after the original bytes were restored runs the
    // padding and falls into the next function in libc).
    TEST_CASE("detach after watch --count during a thread storm never kills the target")
    {
        require_attach();
        constexpr int rounds = 150;
        int failures = 0;
        std::string first_failure;
        for (int round = 0; round < rounds && failures < 3; ++round) {
            temp_file record("churn-storm-record");
            auto target = child_process::spawn({fixture_path("churn"), "--record", record.path(), "--wait-start", "8",
                                                "50"});
            const pid_t pid = target.pid();
            REQUIRE(target.require_line(10s) == fmt::format("ready {}", pid));
            auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                               "watch --count 5"});
            REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
            REQUIRE(target.write_stdin("x"));
            auto tdctl_status = tdctl.require_exit(20s);
            auto target_status = target.require_exit(20s);
            if (!tdctl_status.is_success() || !target_status.is_success()) {
                ++failures;
                if (first_failure.empty())
                    first_failure = fmt::format("round {}: tdctl {}, target {}; target stderr: {}\ntdctl stdout:\n{}"
                                                "tdctl stderr: {}",
                                                round, tdctl_status.describe(), target_status.describe(),
                                                target.stderr_text(), tdctl.stdout_text(), tdctl.stderr_text());
            }
        }
        CHECK_MESSAGE(failures == 0, failures << " bad rounds; first: " << first_failure);
    }

    // A launched target whose threads die around the end of a counted watch:
    // tdctl detaches, then waits for the target forever. A thread that
    // exited while traced stays a zombie until its tracer reaps it
    // (waitpid(tid, __WALL)); tdctl forgets it at detach, so the leader can
    // never be reaped and wait_launched_exit() polls forever.
    TEST_CASE("launch + watch --count during a thread storm: tdctl ends with the target's status")
    {
        require_ptrace();
        constexpr int rounds = 150;
        for (int round = 0; round < rounds; ++round) {
            CAPTURE(round);
            temp_file record("churn-count-record");
            auto run = run_tdctl({"--json", "-e", "watch --count 5", "--", fixture_path("churn"), "--record",
                                  record.path(), "8", "50"},
                                 15s);
            INFO(run.describe());
            REQUIRE(run.result.status.exit_code() == 0);
            auto exits = run.of_type("exit");
            REQUIRE(exits.size() == 1);
            REQUIRE(int_field(exits[0], "status") == 0);
        }
    }

    // Attaching to a process that is creating and joining threads: tdctl
    // sometimes dies with SIGSEGV (an exception in traced_process::attach()
    // unwinds into ~traced_process() -> detach() -> stop_all() -> on_clone(),
    // which dereferences memory_ before attach() created it), sometimes
    // refuses with a wrong reason ("no such process", "already traced by
    // <tdctl itself>"), and `threads` sometimes fails with TD_DBERR.
    TEST_CASE("attach to a process in a thread storm: every attach works, tdctl never crashes")
    {
        require_attach();
        constexpr int attaches_wanted = 120;
        int attaches = 0;
        std::vector<std::string> problems;
        auto deadline = std::chrono::steady_clock::now() + 60s;
        while (attaches < attaches_wanted && std::chrono::steady_clock::now() < deadline) {
            temp_file record("churn-storm-record");
            auto target = child_process::spawn({fixture_path("churn"), "--record", record.path(), "8", "500"});
            const pid_t pid = target.pid();
            REQUIRE(wait_until([&] { return count_kind(parse_record(read_text_file(record.path()).value_or("")),
                                                       "thread") > 0; },
                               10s));
            while (attaches < attaches_wanted && !target.wait_exit(0ms)) {
                auto run = run_tdctl({"-p", std::to_string(pid), "-e", "threads"}, 20s);
                ++attaches;
                const auto& st = run.result.status;
                if (st.is_signaled()) {
                    problems.push_back("tdctl " + st.describe() + ": " + run.result.err);
                } else if (st.exit_code() != 0) {
                    // A refusal is only right for a process that is gone.
                    auto state = proc_state(pid);
                    if (state && *state != 'Z')
                        problems.push_back(fmt::format("exit {} while the target runs: {}", st.exit_code(),
                                                       run.result.err));
                }
            }
            auto status = target.require_exit(30s);
            if (!status.is_success())
                problems.push_back("target " + status.describe() + ": " + target.stderr_text());
        }
        std::string all;
        for (const auto& p : problems)
            all += p + "\n";
        CHECK_MESSAGE(problems.empty(), problems.size() << " problems in " << attaches << " attaches:\n" << all);
    }

    // A signal to tdctl in the middle of a watch while the target keeps
    // creating threads: tdctl sometimes never exits. Seen stuck in
    // breakpoints::remove -> finish_step_over -> consume_owed_sigtrap ->
    // waiter::wait_for(tid): a blocking waitpid on a thread that was only
    // resumed in place (pc one past a `cc c3` site) and owes no SIGTRAP, so
    // it runs on and never stops again.
    TEST_CASE("a signal to tdctl while the target storms threads and signals: the target never notices")
    {
        require_attach();
        constexpr int signals_to_send = 1000;
        for (int round = 0; round < 15; ++round) {
            const int sig = std::array{SIGTERM, SIGINT, SIGHUP}[round % 3];
            CAPTURE(round);
            CAPTURE(sig);
            temp_file record("signals-record");
            auto target = child_process::spawn({fixture_path("signals"), "--record", record.path(), "--wait-start",
                                                std::to_string(signals_to_send)});
            const pid_t pid = target.pid();
            REQUIRE(target.require_line(10s) == fmt::format("ready {}", pid));
            auto libc = find_module(pid, "libc.so.6");
            const auto create_addr = libc.address_of("__nptl_create_event");
            const auto original = read_proc_mem(pid, create_addr, 16);

            auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "watch"});
            REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
            CHECK(wait_until([&] { return read_proc_mem(pid, create_addr, 16) != original; }, 10s));
            REQUIRE(target.write_stdin("x"));

            std::vector<json> events;
            while (events.size() < 20) {
                auto line = tdctl.read_line(10s);
                REQUIRE_MESSAGE(line.has_value(), "tdctl printed no event; stderr: " << tdctl.stderr_text());
                auto rec = json::parse(*line, nullptr, false);
                REQUIRE_MESSAGE(!rec.is_discarded(), "not JSON: " << *line);
                if (rec.value("type", "") == "event")
                    events.push_back(rec);
            }
            REQUIRE(tdctl.send_signal(sig));
            auto status = tdctl.require_exit(20s);
            INFO("tdctl stdout:\n" << tdctl.stdout_text() << "stderr:\n" << tdctl.stderr_text());
            CHECK(status.exit_code() == 128 + sig);
            auto records = parse_records(tdctl.stdout_text());
            CHECK(records_of_type(records, "detached").size() == 1);

            if (!target.wait_exit(0ms)) {
                // Still storming: the breakpoint is gone and nobody traces it.
                try {
                    CHECK(read_proc_mem(pid, create_addr, 16) == original);
                    CHECK(tracer_pid(pid) == 0);
                } catch (const tdctl::error& e) {
                    CHECK_MESSAGE(target.wait_exit(5s).has_value(), "cannot read the live target: " << e.what());
                }
            }
            auto target_status = target.require_exit(30s);
            auto facts = read_record(record.path());
            INFO("record: " << format_record(facts));
            CHECK_MESSAGE(target_status.is_success(), target_status.describe() << "; " << target.stderr_text());
            CHECK(count_kind(facts, "signal-sent") == signals_to_send);
            CHECK(count_kind(facts, "signal-got") == signals_to_send);
            CHECK(count_kind(facts, "done") == 1);
            auto recorded = to_multiset(thread_tids(facts));
            for (const auto& e : events)
                CHECK_MESSAGE(recorded.contains(static_cast<pid_t>(int_field(e, "tid"))),
                              "not a thread of the fixture: " << e.dump());
        }
    }
}
