// Per-LWP resource usage (seed 001, pthread_getrusage_np, seen from outside
// the target) and LWP times (seed 004, _lwp_info), with the Linux sources of
// SPEC §7.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>
#include <vector>

#include "base/types.hpp"
#include "ptrace/task_files.hpp"

namespace tdctl::core {

/// struct rusage of one LWP. Errors are errno values: ESRCH when the LWP is
/// not (or no longer) a task of the process.
///   ru_utime, ru_stime    /proc/PID/task/TID/stat fields 14–15 (clock ticks)
///   ru_maxrss             process-wide VmHWM, kB (Linux keeps no per-thread RSS)
///   ru_minflt, ru_majflt  stat fields 10 and 12
///   ru_inblock/oublock    /proc/PID/task/TID/io read_bytes, write_bytes ÷ 512
///   ru_nvcsw, ru_nivcsw   status voluntary_/nonvoluntary_ctxt_switches
///   ru_nsignals           `signals`, counted by the controller from signal-delivery stops
///   ru_ixrss, ru_idrss, ru_isrss, ru_nswap, ru_msgsnd, ru_msgrcv: not kept by Linux, 0
std::expected<struct rusage, int> read_lwp_rusage(pid_t pid, tid_t lwp, std::uint64_t signals);

/// One row of `rusage collect`: the usage and the LWP's name (comm, from the
/// same stat read). `maxrss_kb`, when given, is used for ru_maxrss instead of
/// reading the process's VmHWM again (it is the same for every LWP).
struct lwp_rusage_row {
    struct rusage usage {};
    std::string comm;
};
std::expected<lwp_rusage_row, int> read_lwp_rusage_row(procfs::task_files& files, pid_t pid, tid_t lwp,
                                                       std::uint64_t signals, std::optional<long> maxrss_kb);

/// The same for many LWPs at once: result[i] is lwps[i]'s row (ESRCH when
/// gone), signals[i] its signal count. The reads are spread over a few
/// threads on a large process (procfs::task_files::read_each).
std::vector<std::expected<lwp_rusage_row, int>> read_lwp_rusage_rows(procfs::task_files& files,
                                                                     const std::vector<tid_t>& lwps,
                                                                     const std::vector<std::uint64_t>& signals,
                                                                     long maxrss_kb);

/// The process's VmHWM (peak resident set), kB; 0 if unreadable.
long process_maxrss_kb(pid_t pid);

/// lwp_utime and lwp_stime of one LWP (seed 004's struct lwpinfo).
struct lwp_times {
    timespec utime{};   ///< user time
    timespec stime{};   ///< system time
};

/// The LWP's CPU time with ns resolution (schedstat's cpu_ns), split between
/// user and system in the ratio of stat's utime:stime ticks — the split the
/// kernel itself uses for getrusage. ESRCH when the LWP is gone.
std::expected<lwp_times, int> read_lwp_times(pid_t pid, tid_t lwp);

/// The same with the LWP's name from the same stat read.
struct lwp_times_row {
    lwp_times times;
    std::string comm;
};
std::expected<lwp_times_row, int> read_lwp_times_row(procfs::task_files& files, tid_t lwp);

/// The same for many LWPs at once (result[i] is lwps[i]'s), the reads spread
/// over a few threads on a large process.
std::vector<std::expected<lwp_times_row, int>> read_lwp_times_rows(procfs::task_files& files,
                                                                   const std::vector<tid_t>& lwps);

/// The user part of `cpu_ns` CPU time, split in the ratio of stat's
/// utime:stime ticks (the split the kernel applies for getrusage); all of it
/// when no tick was charged.
std::uint64_t user_share_ns(std::uint64_t cpu_ns, std::uint64_t utime_ticks, std::uint64_t stime_ticks);

/// One LWP's cumulative counters at one moment (each counts from the LWP's
/// birth, when the kernel zeroes it), for rates over an interval.
struct lwp_counters {
    std::uint64_t cpu_ns = 0;        ///< /proc/PID/task/TID/schedstat: on a CPU, ns
    std::uint64_t wait_ns = 0;       ///< schedstat: runnable on a run queue, waiting for a CPU, ns
    std::uint64_t utime_ticks = 0;   ///< stat field 14, clock ticks
    std::uint64_t stime_ticks = 0;   ///< stat field 15, clock ticks
    std::uint64_t minflt = 0;        ///< stat field 10
    std::uint64_t majflt = 0;        ///< stat field 12
    std::uint64_t nvcsw = 0;         ///< status voluntary_ctxt_switches
    std::uint64_t nivcsw = 0;        ///< status nonvoluntary_ctxt_switches
};

/// Which files a counters read costs: `times` only schedstat and comm (the
/// on-CPU / run-queue / off-CPU split), `full` also stat and status (`top`).
enum class counter_depth { times, full };

/// The counters and the LWP's name (comm) from one read; the fields `depth`
/// does not read stay 0. ESRCH when the LWP is not (or no longer) a live
/// task of the process.
struct lwp_counters_row {
    lwp_counters counters;
    std::string comm;
};
/// Whether a counters read also takes the LWP's name: at `times` depth the
/// name is a file of its own (comm: open, read, close for an LWP read once),
/// at `full` depth it comes with stat either way.
enum class with_name : bool { no, yes };
std::expected<lwp_counters_row, int> read_lwp_counters(procfs::task_files& files, tid_t lwp, counter_depth depth,
                                                       with_name name = with_name::yes);

/// One member of a row that was read (`row->*member`), or the row's errno.
template <typename Row, typename Member>
std::expected<Member, int> member_of(const std::expected<Row, int>& row, Member Row::*member)
{
    if (!row)
        return std::unexpected(row.error());
    return (*row).*member;
}

/// Clock ticks per second (sysconf(_SC_CLK_TCK)).
long clock_ticks_per_second();

double to_seconds(const timeval& tv);
double to_seconds(const timespec& ts);

}  // namespace tdctl::core
