#include "core/lwp_usage.hpp"

#include <cerrno>
#include <unistd.h>

#include "ptrace/procfs.hpp"

namespace tdctl::core {

long clock_ticks_per_second()
{
    static const long hz = [] {
        long v = sysconf(_SC_CLK_TCK);
        return v > 0 ? v : 100;
    }();
    return hz;
}

double to_seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6; }
double to_seconds(const timespec& ts) { return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9; }

namespace {

timeval ticks_to_timeval(std::uint64_t ticks)
{
    long hz = clock_ticks_per_second();
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ticks / static_cast<std::uint64_t>(hz));
    tv.tv_usec = static_cast<suseconds_t>((ticks % static_cast<std::uint64_t>(hz)) * 1000000 / static_cast<std::uint64_t>(hz));
    return tv;
}

bool is_dead_state(char state)
{
    return state == 'Z' || state == 'X' || state == 'x';
}

// The LWP's stat while it is a live thread of the process: /proc/PID/task/TID
// exists only for tasks of PID (no Tgid check needed), and an exited thread
// lingers as a zombie until reaped.
std::optional<procfs::stat_info> live_stat(procfs::task_files& files, tid_t lwp)
{
    auto stat = files.stat(lwp);
    if (!stat || is_dead_state(stat->state))
        return std::nullopt;
    return stat;
}

timespec ns_to_timespec(std::uint64_t ns)
{
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(ns / 1000000000ULL);
    ts.tv_nsec = static_cast<long>(ns % 1000000000ULL);
    return ts;
}

}  // namespace

long process_maxrss_kb(pid_t pid)
{
    auto proc = procfs::read_status(pid);
    return proc ? static_cast<long>(proc->vm_hwm_kb) : 0;
}

std::expected<lwp_rusage_row, int> read_lwp_rusage_row(procfs::task_files& files, pid_t pid, tid_t lwp,
                                                       std::uint64_t signals, std::optional<long> maxrss_kb)
{
    auto stat = live_stat(files, lwp);
    auto status = stat ? files.status(lwp) : std::nullopt;
    if (!status)
        return std::unexpected(ESRCH);
    lwp_rusage_row row;
    struct rusage& ru = row.usage;
    ru.ru_utime = ticks_to_timeval(stat->utime);
    ru.ru_stime = ticks_to_timeval(stat->stime);
    ru.ru_maxrss = maxrss_kb ? *maxrss_kb : process_maxrss_kb(pid);
    ru.ru_minflt = static_cast<long>(stat->minflt);
    ru.ru_majflt = static_cast<long>(stat->majflt);
    if (auto io = files.io(lwp)) {
        ru.ru_inblock = static_cast<long>(io->read_bytes / 512);
        ru.ru_oublock = static_cast<long>(io->write_bytes / 512);
    }
    ru.ru_nvcsw = static_cast<long>(status->voluntary_ctxt_switches);
    ru.ru_nivcsw = static_cast<long>(status->nonvoluntary_ctxt_switches);
    ru.ru_nsignals = static_cast<long>(signals);
    row.comm = std::move(stat->comm);
    return row;
}

std::expected<struct rusage, int> read_lwp_rusage(pid_t pid, tid_t lwp, std::uint64_t signals)
{
    procfs::task_files files(pid, 0);
    return member_of(read_lwp_rusage_row(files, pid, lwp, signals, std::nullopt), &lwp_rusage_row::usage);
}

std::uint64_t user_share_ns(std::uint64_t cpu_ns, std::uint64_t utime_ticks, std::uint64_t stime_ticks)
{
    const std::uint64_t ticks = utime_ticks + stime_ticks;
    if (ticks == 0)
        return cpu_ns;
    return static_cast<std::uint64_t>(static_cast<long double>(cpu_ns) * utime_ticks / ticks);
}

std::expected<lwp_times_row, int> read_lwp_times_row(procfs::task_files& files, tid_t lwp)
{
    auto stat = live_stat(files, lwp);
    auto sched = stat ? files.schedstat(lwp) : std::nullopt;
    if (!sched)
        return std::unexpected(ESRCH);
    std::uint64_t total = sched->cpu_ns;
    std::uint64_t user = user_share_ns(total, stat->utime, stat->stime);
    lwp_times_row row;
    row.times.utime = ns_to_timespec(user);
    row.times.stime = ns_to_timespec(total - user);
    row.comm = std::move(stat->comm);
    return row;
}

std::expected<lwp_counters_row, int> read_lwp_counters(procfs::task_files& files, tid_t lwp, counter_depth depth)
{
    lwp_counters_row row;
    if (depth == counter_depth::full) {
        auto stat = live_stat(files, lwp);
        auto status = stat ? files.status(lwp) : std::nullopt;
        if (!status)
            return std::unexpected(ESRCH);
        row.counters.utime_ticks = stat->utime;
        row.counters.stime_ticks = stat->stime;
        row.counters.minflt = stat->minflt;
        row.counters.majflt = stat->majflt;
        row.counters.nvcsw = status->voluntary_ctxt_switches;
        row.counters.nivcsw = status->nonvoluntary_ctxt_switches;
        row.comm = std::move(stat->comm);
    }
    auto sched = files.schedstat(lwp);
    if (!sched)
        return std::unexpected(ESRCH);
    row.counters.cpu_ns = sched->cpu_ns;
    row.counters.wait_ns = sched->wait_ns;
    if (depth == counter_depth::times)
        row.comm = files.comm(lwp);
    return row;
}

std::expected<lwp_times, int> read_lwp_times(pid_t pid, tid_t lwp)
{
    procfs::task_files files(pid, 0);
    return member_of(read_lwp_times_row(files, lwp), &lwp_times_row::times);
}

}  // namespace tdctl::core
