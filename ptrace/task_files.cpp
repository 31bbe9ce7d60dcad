#include "ptrace/task_files.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

namespace tdctl::procfs {

namespace {

const char* file_name(task_files::file f)
{
    switch (f) {
    case task_files::file::stat: return "stat";
    case task_files::file::status: return "status";
    case task_files::file::io: return "io";
    case task_files::file::schedstat: return "schedstat";
    case task_files::file::comm: return "comm";
    }
    return "stat";
}

}  // namespace

task_files::task_files(pid_t pid, std::size_t max_open) : pid_(pid), max_open_(max_open) {}

std::size_t task_files::descriptor_budget()
{
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0)
        return 0;
    if (lim.rlim_cur < lim.rlim_max) {
        rlimit raised = lim;
        raised.rlim_cur = lim.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &raised) == 0)
            lim = raised;
    }
    // Keep a reserve for everything else tdctl opens (ELF files, /proc/PID/mem,
    // output, the target's modules).
    const rlim_t reserve = 512;
    if (lim.rlim_cur == RLIM_INFINITY)
        return 1 << 20;
    return lim.rlim_cur > reserve ? std::min<std::size_t>(lim.rlim_cur - reserve, 1 << 20) : 0;
}

std::optional<std::string> task_files::read(tid_t tid, file f)
{
    const auto idx = static_cast<std::size_t>(f);
    auto it = fds_.find(tid);
    if (it != fds_.end() && it->second[idx].is_open()) {
        if (auto text = read_fd(it->second[idx].get(), procfs::proc_records::one); text && !text->empty())
            return text;
        // The task is gone (ESRCH) or the descriptor went stale.
        forget(tid);
        return std::nullopt;
    }
    std::string path = fmt::format("/proc/{}/task/{}/{}", pid_, tid.value, file_name(f));
    if (open_ >= max_open_)
        return read_file(path);
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.is_open())
        return std::nullopt;
    auto text = read_fd(fd.get(), procfs::proc_records::one);
    if (!text)
        return std::nullopt;
    fds_[tid][idx] = std::move(fd);
    ++open_;
    return text;
}

std::optional<stat_info> task_files::stat(tid_t tid)
{
    auto text = read(tid, file::stat);
    return text ? parse_stat(*text) : std::nullopt;
}

std::optional<status_info> task_files::status(tid_t tid)
{
    auto text = read(tid, file::status);
    if (!text)
        return std::nullopt;
    return parse_status(*text);
}

std::optional<io_info> task_files::io(tid_t tid)
{
    auto text = read(tid, file::io);
    return text ? parse_io(*text) : std::nullopt;
}

std::optional<schedstat_info> task_files::schedstat(tid_t tid)
{
    auto text = read(tid, file::schedstat);
    return text ? parse_schedstat(*text) : std::nullopt;
}

void task_files::keep_final_comm(tid_t tid, std::string name)
{
    if (!name.empty())
        final_comm_[tid] = std::move(name);
}

std::string task_files::comm(tid_t tid)
{
    if (auto it = final_comm_.find(tid); it != final_comm_.end())
        return it->second;
    auto text = read(tid, file::comm);
    if (!text)
        return {};
    if (!text->empty() && text->back() == '\n')
        text->pop_back();
    return *text;
}

std::optional<std::uint64_t> task_files::process_cpu_ns() const
{
    return procfs::process_cpu_ns(pid_);
}

void task_files::forget(tid_t tid)
{
    final_comm_.erase(tid);
    auto it = fds_.find(tid);
    if (it == fds_.end())
        return;
    for (auto& fd : it->second)
        if (fd.is_open())
            --open_;
    fds_.erase(it);
}

void task_files::clear()
{
    fds_.clear();
    final_comm_.clear();
    open_ = 0;
}

void task_files::retarget(pid_t pid)
{
    clear();
    pid_ = pid;
}

}  // namespace tdctl::procfs
