#include "ptrace/task_files.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <thread>
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

unsigned task_files::reader_count()
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    return static_cast<unsigned>(std::clamp(CPU_COUNT(&set), 1, 4));
}

// The pass the reader threads share: tasks handed out in chunks, each one's
// outcome written only by the thread that took it.
struct task_files::parallel_pass {
    enum class outcome : unsigned char {
        used,         ///< read and passed to `use`
        not_open,     ///< its descriptors are not all open: the calling thread reads it
        read_failed,  ///< a read failed (the task is gone, most likely): the calling thread looks again
    };

    std::span<const fd_row* const> fds;  ///< per task; nullptr: not open
    std::span<const file> which;
    const std::function<void(std::size_t, texts)>& use;
    std::vector<outcome> outcomes = std::vector<outcome>(fds.size(), outcome::used);
    std::atomic<std::size_t> next{0};

    /// One reader: takes chunks until none is left.
    void read_chunks()
    {
        std::vector<std::optional<std::string>> got(which.size());
        constexpr std::size_t chunk = 16;
        const std::size_t n = fds.size();
        for (;;) {
            const std::size_t from = next.fetch_add(chunk, std::memory_order_relaxed);
            if (from >= n)
                return;
            for (std::size_t i = from; i < std::min(n, from + chunk); ++i)
                outcomes[i] = read_task(i, got);
        }
    }

    /// Reads task i's files into `got` and, when all came, passes them to `use`.
    outcome read_task(std::size_t i, std::vector<std::optional<std::string>>& got)
    {
        if (fds[i] == nullptr)
            return outcome::not_open;
        for (std::size_t j = 0; j < which.size(); ++j) {
            got[j] = read_fd((*fds[i])[static_cast<std::size_t>(which[j])].get(), proc_records::one);
            if (!got[j] || got[j]->empty())
                return outcome::read_failed;
        }
        use(i, got);
        return outcome::used;
    }

    /// `workers` readers, this thread one of them, until every task is taken.
    void run(unsigned workers)
    {
        std::vector<std::thread> threads;
        threads.reserve(workers - 1);
        try {
            for (unsigned w = 1; w < workers; ++w)
                threads.emplace_back([this] { read_chunks(); });
        } catch (const std::system_error&) {
            // No thread to spare: the ones started, and this one, read it all.
        }
        read_chunks();
        for (auto& t : threads)
            t.join();
    }
};

void task_files::read_each(const std::vector<tid_t>& tids, std::span<const file> which,
                           const std::function<void(std::size_t, texts)>& use, std::size_t parallel_from)
{
    const std::size_t n = tids.size();
    const unsigned workers = n >= parallel_from ? std::min<unsigned>(reader_count(), static_cast<unsigned>(n)) : 1;
    if (workers <= 1 || which.empty()) {
        std::vector<std::optional<std::string>> got(which.size());
        for (std::size_t i = 0; i < n; ++i) {
            read_here(tids[i], which, got);
            use(i, got);
        }
        return;
    }
    const std::vector<const fd_row*> fds = open_for_readers(tids, which);
    parallel_pass pass{.fds = fds, .which = which, .use = use};
    pass.run(workers);

    std::vector<std::optional<std::string>> got(which.size());
    for (std::size_t i = 0; i < n; ++i) {
        if (pass.outcomes[i] == parallel_pass::outcome::used)
            continue;
        if (pass.outcomes[i] == parallel_pass::outcome::read_failed)
            forget(tids[i]);  // gone (ESRCH), or a descriptor went stale: read afresh
        read_here(tids[i], which, got);
        use(i, got);
    }
}

void task_files::read_here(tid_t tid, std::span<const file> which, std::vector<std::optional<std::string>>& got)
{
    for (std::size_t j = 0; j < which.size(); ++j)
        got[j] = read(tid, which[j]);
}

std::vector<const task_files::fd_row*> task_files::open_for_readers(const std::vector<tid_t>& tids,
                                                                    std::span<const file> which)
{
    // The map changes only in this thread: each task's descriptors are then
    // fixed while the readers run.
    std::vector<const fd_row*> fds(tids.size(), nullptr);
    for (std::size_t i = 0; i < tids.size(); ++i)
        if (open_all(tids[i], which))
            fds[i] = &fds_.find(tids[i])->second;
    return fds;
}

bool task_files::open_all(tid_t tid, std::span<const file> which)
{
    for (file f : which) {
        const auto idx = static_cast<std::size_t>(f);
        auto it = fds_.find(tid);
        if (it != fds_.end() && it->second[idx].is_open())
            continue;
        if (open_ >= max_open_)
            return false;
        std::string path = fmt::format("/proc/{}/task/{}/{}", pid_, tid.value, file_name(f));
        unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd.is_open())
            return false;  // gone, or not readable: the calling thread's read says which
        fds_[tid][idx] = std::move(fd);
        ++open_;
    }
    return true;
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

std::vector<std::string> task_files::comms(const std::vector<tid_t>& tids)
{
    std::vector<std::string> names(tids.size());
    std::vector<tid_t> to_read;
    std::vector<std::size_t> where;
    for (std::size_t i = 0; i < tids.size(); ++i) {
        if (auto it = final_comm_.find(tids[i]); it != final_comm_.end()) {
            names[i] = it->second;
        } else {
            to_read.push_back(tids[i]);
            where.push_back(i);
        }
    }
    static constexpr file which[] = {file::comm};
    read_each(to_read, which, [&](std::size_t k, texts t) {
        std::string& name = names[where[k]];
        if (!t[0])
            return;
        name = *t[0];
        if (!name.empty() && name.back() == '\n')
            name.pop_back();
    });
    return names;
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
