#include "core/accounting/lwp_usage.hpp"

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

namespace {

using file = procfs::task_files::file;

// A row from the texts of stat, status and io (io may be missing: it needs
// more privilege than the others on some systems).
std::expected<lwp_rusage_row, int> rusage_row_from(const std::optional<std::string>& stat_text,
                                                   const std::optional<std::string>& status_text,
                                                   const std::optional<std::string>& io_text, std::uint64_t signals,
                                                   long maxrss_kb)
{
    auto stat = stat_text ? procfs::parse_stat(*stat_text) : std::nullopt;
    if (!stat || is_dead_state(stat->state))
        return std::unexpected(ESRCH);
    if (!status_text)
        return std::unexpected(ESRCH);
    const auto status = procfs::parse_status(*status_text);
    lwp_rusage_row row;
    struct rusage& ru = row.usage;
    ru.ru_utime = ticks_to_timeval(stat->utime);
    ru.ru_stime = ticks_to_timeval(stat->stime);
    ru.ru_maxrss = maxrss_kb;
    ru.ru_minflt = static_cast<long>(stat->minflt);
    ru.ru_majflt = static_cast<long>(stat->majflt);
    if (auto io = io_text ? procfs::parse_io(*io_text) : std::nullopt) {
        ru.ru_inblock = static_cast<long>(io->read_bytes / 512);
        ru.ru_oublock = static_cast<long>(io->write_bytes / 512);
    }
    ru.ru_nvcsw = static_cast<long>(status.voluntary_ctxt_switches);
    ru.ru_nivcsw = static_cast<long>(status.nonvoluntary_ctxt_switches);
    ru.ru_nsignals = static_cast<long>(signals);
    row.comm = std::move(stat->comm);
    return row;
}

}  // namespace

std::expected<lwp_rusage_row, int> read_lwp_rusage_row(procfs::task_files& files, pid_t pid, tid_t lwp,
                                                       std::uint64_t signals, std::optional<long> maxrss_kb)
{
    auto stat = files.read(lwp, file::stat);
    auto status = stat ? files.read(lwp, file::status) : std::nullopt;
    if (!status)
        return std::unexpected(ESRCH);
    auto io = files.read(lwp, file::io);
    return rusage_row_from(stat, status, io, signals, maxrss_kb ? *maxrss_kb : process_maxrss_kb(pid));
}

std::vector<std::expected<lwp_rusage_row, int>> read_lwp_rusage_rows(procfs::task_files& files,
                                                                     const std::vector<tid_t>& lwps,
                                                                     const std::vector<std::uint64_t>& signals,
                                                                     long maxrss_kb)
{
    static constexpr file which[] = {file::stat, file::status, file::io};
    std::vector<std::expected<lwp_rusage_row, int>> rows(lwps.size(), std::unexpected(ESRCH));
    files.read_each(lwps, which, [&](std::size_t i, procfs::task_files::texts t) {
        rows[i] = rusage_row_from(t[0], t[1], t[2], i < signals.size() ? signals[i] : 0, maxrss_kb);
    });
    return rows;
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

namespace {

std::expected<lwp_times_row, int> times_row_from(const std::optional<std::string>& stat_text,
                                                 const std::optional<std::string>& schedstat_text)
{
    auto stat = stat_text ? procfs::parse_stat(*stat_text) : std::nullopt;
    if (!stat || is_dead_state(stat->state))
        return std::unexpected(ESRCH);
    auto sched = schedstat_text ? procfs::parse_schedstat(*schedstat_text) : std::nullopt;
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

}  // namespace

std::expected<lwp_times_row, int> read_lwp_times_row(procfs::task_files& files, tid_t lwp)
{
    auto stat = files.read(lwp, file::stat);
    auto sched = stat ? files.read(lwp, file::schedstat) : std::nullopt;
    return times_row_from(stat, sched);
}

std::vector<std::expected<lwp_times_row, int>> read_lwp_times_rows(procfs::task_files& files,
                                                                   const std::vector<tid_t>& lwps)
{
    static constexpr file which[] = {file::stat, file::schedstat};
    std::vector<std::expected<lwp_times_row, int>> rows(lwps.size(), std::unexpected(ESRCH));
    files.read_each(lwps, which,
                    [&](std::size_t i, procfs::task_files::texts t) { rows[i] = times_row_from(t[0], t[1]); });
    return rows;
}

std::expected<lwp_counters_row, int> read_lwp_counters(procfs::task_files& files, tid_t lwp, counter_depth depth,
                                                       with_name name)
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
    if (depth == counter_depth::times && name == with_name::yes)
        row.comm = files.comm(lwp);
    return row;
}

std::expected<lwp_times, int> read_lwp_times(pid_t pid, tid_t lwp)
{
    procfs::task_files files(pid, 0);
    return member_of(read_lwp_times_row(files, lwp), &lwp_times_row::times);
}

}  // namespace tdctl::core
