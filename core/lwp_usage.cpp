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

timespec ns_to_timespec(std::uint64_t ns)
{
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(ns / 1000000000ULL);
    ts.tv_nsec = static_cast<long>(ns % 1000000000ULL);
    return ts;
}

}  // namespace

std::expected<struct rusage, int> read_lwp_rusage(pid_t pid, tid_t lwp, std::uint64_t signals)
{
    auto stat = procfs::read_task_stat(pid, lwp);
    auto status = procfs::read_task_status(pid, lwp);
    // An exited thread lingers as a zombie until reaped: it is no live thread.
    if (!stat || !status || status->tgid != pid || is_dead_state(stat->state))
        return std::unexpected(ESRCH);
    struct rusage ru {};
    ru.ru_utime = ticks_to_timeval(stat->utime);
    ru.ru_stime = ticks_to_timeval(stat->stime);
    if (auto proc = procfs::read_status(pid))
        ru.ru_maxrss = static_cast<long>(proc->vm_hwm_kb);
    ru.ru_minflt = static_cast<long>(stat->minflt);
    ru.ru_majflt = static_cast<long>(stat->majflt);
    if (auto io = procfs::read_task_io(pid, lwp)) {
        ru.ru_inblock = static_cast<long>(io->read_bytes / 512);
        ru.ru_oublock = static_cast<long>(io->write_bytes / 512);
    }
    ru.ru_nvcsw = static_cast<long>(status->voluntary_ctxt_switches);
    ru.ru_nivcsw = static_cast<long>(status->nonvoluntary_ctxt_switches);
    ru.ru_nsignals = static_cast<long>(signals);
    return ru;
}

std::expected<lwp_times, int> read_lwp_times(pid_t pid, tid_t lwp)
{
    auto stat = procfs::read_task_stat(pid, lwp);
    auto sched = procfs::read_task_schedstat(pid, lwp);
    if (!stat || !sched || is_dead_state(stat->state))
        return std::unexpected(ESRCH);
    std::uint64_t total = sched->cpu_ns;
    std::uint64_t ticks = stat->utime + stat->stime;
    std::uint64_t user = ticks == 0 ? total
                                    : static_cast<std::uint64_t>(static_cast<long double>(total) * stat->utime / ticks);
    lwp_times t;
    t.utime = ns_to_timespec(user);
    t.stime = ns_to_timespec(total - user);
    return t;
}

}  // namespace tdctl::core
