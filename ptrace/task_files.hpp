// Open /proc/PID/task/TID/* files kept for re-reading: a pread regenerates
// the file, so a read costs one system call instead of open+read+close and
// the path lookup (about 14 µs instead of 30 µs for stat+status+io per LWP
// on a 1000-thread process). Bounded; an entry whose task is gone is dropped.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/types.h>

#include "base/types.hpp"
#include "base/unique_fd.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::procfs {

class task_files {
public:
    enum class file { stat, status, io, schedstat, comm };

    /// `max_open` bounds the descriptors held (beyond it, files are opened,
    /// read and closed as usual).
    task_files(pid_t pid, std::size_t max_open);

    /// The file's contents now; std::nullopt when the task is gone.
    std::optional<std::string> read(tid_t tid, file f);

    /// The contents of `which` for one task: texts[k] is which[k]'s, std::nullopt
    /// when the task is gone.
    using texts = std::span<const std::optional<std::string>>;

    /// Reads `which` of every task in `tids` and calls `use(i, texts)` once
    /// for each tids[i]. From `parallel_from` tasks on, the reads are spread
    /// over up to reader_count() threads: the descriptors are opened here
    /// first (the threads only pread them; a read costs 1–11 µs of kernel
    /// formatting, /proc/PID/status the most), and `use` may then be called
    /// from several threads at once for different i — it must touch only what
    /// belongs to i. Tasks beyond the descriptor bound, and tasks found gone,
    /// are read (or forgotten) in this thread after the others.
    void read_each(const std::vector<tid_t>& tids, std::span<const file> which,
                   const std::function<void(std::size_t, texts)>& use, std::size_t parallel_from = 128);

    /// Threads read_each() reads with: the CPUs this process may run on
    /// (sched_getaffinity), at most 4.
    static unsigned reader_count();

    std::optional<stat_info> stat(tid_t tid);
    std::optional<status_info> status(tid_t tid);
    std::optional<io_info> io(tid_t tid);
    std::optional<schedstat_info> schedstat(tid_t tid);
    /// comm without the newline; "" when the task is gone.
    std::string comm(tid_t tid);
    /// The whole process's CPU time, ns: every thread's, the ended ones' up
    /// to their very end (the kernel's process CPU-time clock,
    /// clock_getcpuclockid(3)); std::nullopt when the process is gone.
    std::optional<std::uint64_t> process_cpu_ns() const;

    /// comm() of many tasks at once (result[i] is tids[i]'s), read with
    /// read_each().
    std::vector<std::string> comms(const std::vector<tid_t>& tids);

    /// Keeps `name` as the task's comm from now on, read no more: a thread
    /// past its TD_DEATH report runs no code that could rename it (another
    /// thread writing its comm file then goes unseen).
    void keep_final_comm(tid_t tid, std::string name);

    /// Closes a task's files (it exited; its TID may be reused).
    void forget(tid_t tid);
    void clear();
    void retarget(pid_t pid);

    /// Raises the soft RLIMIT_NOFILE to the hard limit and returns a bound
    /// for max_open that leaves room for everything else.
    static std::size_t descriptor_budget();

private:
    static constexpr std::size_t file_count = 5;
    using fd_row = std::array<unique_fd, file_count>;  ///< indexed by file
    struct parallel_pass;

    /// Reads `which` of one task in this thread: got[k] is which[k]'s.
    void read_here(tid_t tid, std::span<const file> which, std::vector<std::optional<std::string>>& got);
    /// Opens what is not open yet of `which` for each task: result[i] is
    /// tids[i]'s descriptors, nullptr when not all could be opened (the bound,
    /// or the task is gone).
    std::vector<const fd_row*> open_for_readers(const std::vector<tid_t>& tids, std::span<const file> which);
    /// False when one of `which` could not be opened (those before it stay open).
    bool open_all(tid_t tid, std::span<const file> which);

    pid_t pid_;
    std::size_t max_open_;
    std::size_t open_ = 0;
    std::unordered_map<tid_t, fd_row> fds_;
    std::unordered_map<tid_t, std::string> final_comm_;
};

}  // namespace tdctl::procfs
