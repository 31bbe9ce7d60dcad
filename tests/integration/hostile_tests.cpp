// Programs written to break debuggers (hostile_target.c): a leader that
// calls pthread_exit, exec from a non-leader thread, fork and vfork from a
// threaded process, a raw clone(2) thread, pthread_kill, SIGTRAP raised or
// trapped by the program itself, thread renames, the thread library reached
// through dlopen. Under tdctl, launched or attached, each must end exactly
// as it does alone: the same exit status and stdout, one TD_CREATE per
// pthread_create it made, no task left traced or stopped after a detach.
#include <doctest/doctest.h>

#include <charconv>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

// Every mode ends in well under a second alone; tdctl must end by itself.
constexpr milliseconds run_bound{30000};

// The sum of the target's "created N" lines: how many pthread_create calls
// the process made (its forked children's not counted).
std::size_t created_count(const std::string& out)
{
    std::size_t total = 0;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        if (!line.starts_with("created "))
            continue;
        std::size_t n = 0;
        auto tail = line.substr(8);
        auto [end, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), n);
        if (ec != std::errc{} || end != tail.data() + tail.size())
            throw std::runtime_error("bad line from hostile_target: " + line);
        total += n;
    }
    return total;
}

// The exit code tdctl ends with for a launched target that ended so: its
// exit status, or 128 + N when signal N killed it.
int launch_exit_code(const exit_status& status)
{
    return status.is_signaled() ? 128 + status.term_signal() : status.exit_code();
}

// The target alone, with its gates opened at once when gated.
command_result native_run(const std::string& program, const std::string& mode, bool gated)
{
    std::vector<std::string> argv{program};
    if (gated)
        argv.push_back("--gated");
    argv.push_back(mode);
    run_options options;
    options.stdin_text = gated ? "go\nend\n" : "";
    auto native = run_command(argv, run_bound, options);
    INFO("alone: ", native.describe());
    REQUIRE_MESSAGE(native.err.empty(), "the target failed a check of its own");
    REQUIRE(created_count(native.out) > 0);
    return native;
}

// `tdctl --json -- PROGRAM MODE` against the same program alone.
void check_launched(const std::string& program, const std::string& mode)
{
    require_ptrace();
    auto native = native_run(program, mode, false);
    auto run = run_tdctl({"--json", "--", program, mode}, run_bound);
    INFO("alone: ", native.describe());
    INFO("under tdctl: ", run.describe());
    CHECK(run.result.status.exit_code() == launch_exit_code(native.status));
    CHECK(run.result.out == native.out);
    CHECK(run.events("TD_CREATE").size() == created_count(native.out));
    auto bad = malformed_thread_events(run.events("TD_CREATE")) + malformed_thread_events(run.events("TD_DEATH"));
    CHECK_MESSAGE(bad.empty(), bad);
    CHECK(run.of_type("exit").size() == 1);
}

// Tasks of pid still traced or stopped ('t' tracing stop, 'T' stopped: a
// tracer that goes away leaves a task in a group stop stopped).
std::string traced_or_stopped(pid_t pid)
{
    return traced_tasks(pid, "tT");
}

// The target started gated; `tdctl --json -p PID -e 'watch --for 1' -e
// detach` attached and armed (libc's __nptl_create_event changed) before
// the target is let go; after tdctl ended and before the target's last
// gate opens, no task of it is traced or stopped. Then its status and
// stdout are those of a gated run alone, and every creation was reported.
void check_attached(const std::string& mode)
{
    require_attach();
    auto native = native_run(HOSTILE_TARGET, mode, true);
    INFO("alone: ", native.describe());

    auto target = child_process::spawn({HOSTILE_TARGET, "--gated", mode});
    REQUIRE(target.require_line(10s) == "ready");
    const pid_t pid = target.pid();
    const auto create_event = find_module(pid, "libc.so.6").address_of("__nptl_create_event");
    const auto original = read_proc_mem(pid, create_event, 16);
    auto tdctl = child_process::spawn(
        {tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "watch --for 1", "-e", "detach"});
    const auto first = tdctl.require_line(20s);
    REQUIRE_MESSAGE(json::parse(first, nullptr, false).value("type", "") == "attached", first);
    REQUIRE_MESSAGE(wait_until([&] { return read_proc_mem(pid, create_event, 16) != original; }, 10s),
                    "tdctl attached but armed no creation event within 10 s");
    REQUIRE(target.write_stdin("go\n"));
    for (;;) {
        auto line = target.read_line(10s);
        REQUIRE_MESSAGE(line.has_value(), "the target never reached its last gate; stdout: ", target.stdout_text(),
                        "; tdctl's stderr: ", tdctl.stderr_text());
        if (*line == "held")
            break;
    }
    auto tdctl_status = tdctl.wait_exit(run_bound);
    REQUIRE_MESSAGE(tdctl_status.has_value(), "tdctl hung; stderr: ", tdctl.stderr_text());
    INFO("tdctl: ", tdctl_status->describe(), "; stderr: ", tdctl.stderr_text());
    CHECK(tdctl_status->is_success());
    const auto leftovers = traced_or_stopped(pid);
    CHECK_MESSAGE(leftovers.empty(), "after the detach:\n", leftovers);

    REQUIRE(target.write_stdin("end\n"));
    auto status = target.require_exit(10s);
    CHECK_MESSAGE(status == native.status, "alone ", native.status.describe(), ", after the detach ",
                  status.describe());
    CHECK(target.stdout_text() == native.out);
    const auto records = parse_records(tdctl.stdout_text());
    CHECK(event_records(records, "TD_CREATE").size() == created_count(native.out));
}

}  // namespace

TEST_SUITE("programs that break debuggers")
{
    TEST_CASE("leader-exit: the leader calls pthread_exit, the other threads go on creating; launched")
    {
        check_launched(HOSTILE_TARGET, "leader-exit");
    }
    TEST_CASE("leader-exit: attached, then detached")
    {
        check_attached("leader-exit");
    }

    TEST_CASE("exec-true: a non-leader thread execs /bin/true; launched")
    {
        check_launched(HOSTILE_TARGET, "exec-true");
    }
    TEST_CASE("exec-self: a non-leader thread execs the program, whose new image creates threads; launched")
    {
        check_launched(HOSTILE_TARGET, "exec-self");
    }
    TEST_CASE("exec-self: attached, then detached from the new image")
    {
        check_attached("exec-self");
    }

    TEST_CASE("fork: fork from main and vfork from a thread while a thread creates threads; launched")
    {
        check_launched(HOSTILE_TARGET, "fork");
    }
    TEST_CASE("fork: attached, then detached")
    {
        check_attached("fork");
    }

    // Regression: the raw thread shares main's TLS, so its thread pointer is
    // main's handle; at its exit tdctl put main's record "back as found",
    // turning main's reporting off: no TD_CREATE after it (every run).
    TEST_CASE("raw-clone: a clone(2) thread unknown to nptl signals itself; launched")
    {
        check_launched(HOSTILE_TARGET, "raw-clone");
    }
    TEST_CASE("raw-clone: attached, then detached")
    {
        check_attached("raw-clone");
    }

    TEST_CASE("signals: pthread_kill to chosen threads, SIGRTMIN queued three times; launched")
    {
        check_launched(HOSTILE_TARGET, "signals");
    }
    TEST_CASE("signals: attached, then detached")
    {
        check_attached("signals");
    }

    // Regression: pthread_create reports TD_CREATE with every signal
    // blocked; the trap byte there, forced on a thread that blocks SIGTRAP,
    // reset the program's SIGTRAP handler to SIG_DFL (kernel
    // force_sig_fault), so its own next SIGTRAP killed it (every run; alone
    // it exits 0 after 8 handler runs). ptrace/sigtrap_guard.hpp.
    TEST_CASE("sigtrap: raise(SIGTRAP) with a handler, as creations hit the reporting address; launched")
    {
        check_launched(HOSTILE_TARGET, "sigtrap");
    }
    TEST_CASE("sigtrap: attached, then detached")
    {
        check_attached("sigtrap");
    }
    TEST_CASE("int3: the program's own int3 instructions with a SIGTRAP handler; launched")
    {
        check_launched(HOSTILE_TARGET, "int3");
    }
    TEST_CASE("int3: attached, then detached")
    {
        check_attached("int3");
    }
    // Regression: the SIGTRAP guard kept a creator's mask for its trap; with
    // only TD_DEATH armed the creator never traps at its creation, and the
    // detach "put back" that stale mask (every signal blocked) over the one
    // pthread_create had restored: main blocked every signal for good.
    TEST_CASE("sigtrap-churn: attached with only deaths watched, main's signal mask is its own after detach")
    {
        require_attach();
        auto target = child_process::spawn({HOSTILE_TARGET, "--gated", "sigtrap-churn"});
        REQUIRE(target.require_line(10s) == "ready");
        const pid_t pid = target.pid();
        const auto mask_of_main = [pid] {
            auto status = read_text_file(fmt::format("/proc/{}/task/{}/status", pid, pid)).value_or("");
            auto at = status.find("SigBlk:");
            return at == std::string::npos ? ~0ull : std::strtoull(status.c_str() + at + 7, nullptr, 16);
        };
        const auto before = mask_of_main();
        auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                           "watch death --for 0.5", "-e", "detach"});
        const auto first = tdctl.require_line(20s);
        REQUIRE_MESSAGE(json::parse(first, nullptr, false).value("type", "") == "attached", first);
        REQUIRE(target.write_stdin("go\n"));
        auto tdctl_status = tdctl.wait_exit(run_bound);
        REQUIRE_MESSAGE(tdctl_status.has_value(), "tdctl hung; stderr: ", tdctl.stderr_text());
        CHECK(tdctl_status->is_success());
        // Inside each pthread_create main blocks every signal for a moment;
        // between them (sleeping) its mask is the one it had.
        CHECK_MESSAGE(wait_until([&] { return mask_of_main() == before; }, 2s), "main's SigBlk after the detach: ",
                      fmt::format("{:#x}", mask_of_main()), ", before: ", fmt::format("{:#x}", before));
        for (;;) {
            auto line = target.read_line(20s);
            REQUIRE_MESSAGE(line.has_value(), "the target never reached its last gate; stdout: ", target.stdout_text());
            if (*line == "held")
                break;
        }
        REQUIRE(target.write_stdin("end\n"));
        CHECK(target.require_exit(10s).is_success());
        CHECK(target.stdout_text().find("SIGTRAP handled 1 times") != std::string::npos);
    }

    TEST_CASE("sigtrap-default: raise(SIGTRAP) with no handler kills the target; launched")
    {
        check_launched(HOSTILE_TARGET, "sigtrap-default");
    }

    TEST_CASE("setname: threads renamed by themselves and by main, main renamed; launched")
    {
        check_launched(HOSTILE_TARGET, "setname");
    }
    TEST_CASE("setname: attached, then detached")
    {
        check_attached("setname");
    }

    TEST_CASE("dlopen: pthread_create through dlopen(\"libpthread.so.0\") and dlsym; launched")
    {
        check_launched(HOSTILE_TARGET, "dlopen");
    }
    TEST_CASE("dlopen: attached, then detached")
    {
        check_attached("dlopen");
    }

    TEST_CASE("static build: leader-exit, exec-self, fork, raw-clone, signals, setname, sigtrap-default; launched")
    {
        for (const char* mode :
             {"leader-exit", "exec-self", "fork", "raw-clone", "signals", "setname", "sigtrap-default"}) {
            INFO("mode ", mode);
            check_launched(HOSTILE_TARGET_STATIC, mode);
        }
    }
    TEST_CASE("static build: sigtrap, int3; launched")
    {
        for (const char* mode : {"sigtrap", "int3"}) {
            INFO("mode ", mode);
            check_launched(HOSTILE_TARGET_STATIC, mode);
        }
    }
}
