// Shared by the statistics, rusage and lwpinfo tests (SPEC §6, §7): the
// stats_target fixture driven under an in-process session, the kernel's own
// numbers read straight from /proc (independently of tdctl's procfs parsers,
// so the two can disagree), and running the tdctl binary with --json.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "core/session/session.hpp"
#include "tests/support/support.hpp"

namespace tdctl::stats_test {

using namespace std::chrono_literals;
using json = nlohmann::json;

// ---------------------------------------------------------------- the kernel's view

/// /proc/PID/task/TID/schedstat: ns on a CPU, ns waiting on a run queue.
struct sched_sample {
    std::uint64_t cpu_ns = 0;
    std::uint64_t wait_ns = 0;
};
std::optional<sched_sample> read_sched(pid_t pid, pid_t tid);

/// The stat fields SPEC §7 names (proc(5) numbering), from /proc/PID/task/TID/stat
/// or, for tid 0, /proc/PID/stat (process totals, exited threads included).
struct stat_sample {
    char state = '?';             ///< 3 ('R', 'S', 'Z' for an exited thread not yet reaped, ...)
    std::uint64_t minflt = 0;     ///< 10
    std::uint64_t majflt = 0;     ///< 12
    std::uint64_t utime = 0;      ///< 14, clock ticks
    std::uint64_t stime = 0;      ///< 15, clock ticks
    std::uint64_t starttime = 0;  ///< 22, clock ticks since boot (tells TID reuse apart)
};
std::optional<stat_sample> read_stat(pid_t pid, pid_t tid);

/// The whole /proc/PID/task/TID/status (or /proc/PID/status for tid 0) as
/// "Key" -> first number of the value; keys without a number are left out.
std::optional<std::map<std::string, std::uint64_t>> read_status_numbers(pid_t pid, pid_t tid);

/// /proc/PID/task/TID/io read_bytes and write_bytes.
struct io_sample {
    std::uint64_t read_bytes = 0;
    std::uint64_t write_bytes = 0;
};
std::optional<io_sample> read_io(pid_t pid, pid_t tid);

/// Everything SPEC §7 derives a struct rusage from, for one task at one moment.
struct usage_sample {
    stat_sample stat;
    std::uint64_t nvcsw = 0, nivcsw = 0;  ///< status voluntary_/nonvoluntary_ctxt_switches
    std::uint64_t vm_hwm_kb = 0;          ///< process-wide VmHWM
    io_sample io;
};
std::optional<usage_sample> read_usage(pid_t pid, pid_t tid);

/// Sum of the schedstat samples of every task of pid, read one after another.
struct process_sched {
    std::map<pid_t, sched_sample> tasks;
    std::uint64_t at_ns = 0;   ///< CLOCK_MONOTONIC after the last read
};
process_sched read_process_sched(pid_t pid);

/// CPU time in ns and wait time in ns that the tasks present in both samples
/// accumulated between them.
struct sched_delta {
    std::uint64_t cpu_ns = 0;
    std::uint64_t wait_ns = 0;
    std::uint64_t wall_ns = 0;
};
sched_delta delta(const process_sched& before, const process_sched& after);

std::uint64_t monotonic_ns();
long ticks_per_second();
/// CPUs the process may run on (sched_getaffinity), at least 1.
int cpus_of(pid_t pid);

// ---------------------------------------------------------------- the fixture

/// stats_target (tests/stats/stats_target.c) with a record file, answering on
/// stdin/stdout. Owned: killed and reaped by the destructor.
class stats_target {
public:
    stats_target();

    pid_t pid() const { return child_.pid(); }
    pid_t worker() const { return worker_; }
    const std::string& record_path() const { return record_.path(); }
    test::child_process& child() { return child_; }

    /// Sends one command and returns its answer. While waiting, `s` (when
    /// given) gets its stops serviced: a thread the fixture creates or joins
    /// is held at its clone or exit stop until the session handles it.
    /// Throws std::runtime_error after `timeout`.
    std::string ask(std::string_view command, core::session* s, std::chrono::milliseconds timeout = 15s);
    /// ask(), then checks the answer starts with `expect` (throws otherwise).
    std::string ask_expect(std::string_view command, std::string_view expect, core::session* s,
                           std::chrono::milliseconds timeout = 15s);

private:
    test::temp_file record_;
    test::child_process child_;
    pid_t worker_ = 0;
};

/// The absolute path of the stats_target fixture (compiled in).
std::string stats_target_path();

/// Services the session's stops for about `duration`.
void pump_for(core::session& s, std::chrono::milliseconds duration);

/// Attaches a session to pid, REQUIRE-ing success.
std::unique_ptr<core::session> attach(pid_t pid);

/// Spins the fixture's worker, enables statistics, spins again, execs the
/// fixture (`exec_command`: "exec" from the worker, "exec-main" from the main
/// thread), spins the new image's worker; then a_concurrency_num must match
/// the process's utime+stime growth (10 % and 4 ticks) and nlwps be about 2
/// (10 %): the window goes on across the exec. doctest CHECKs.
void check_stats_across_exec(const char* exec_command);

// ---------------------------------------------------------------- tdctl --json

struct cli_run {
    test::command_result result;
    std::vector<json> records;
    std::vector<json> of_type(std::string_view type) const;
    std::string describe() const;
};

/// Runs `tdctl --json -p PID` followed by args; parses every stdout line as JSON.
cli_run run_tdctl_json(pid_t pid, const std::vector<std::string>& args,
                       std::chrono::milliseconds timeout = 60s);

/// "-e" "cmd" for each command.
std::vector<std::string> evals(const std::vector<std::string>& commands);

}  // namespace tdctl::stats_test
