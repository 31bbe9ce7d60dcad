// Readers and parsers for the /proc files the controller needs. Parsers take
// text (unit-tested on canned input); readers return std::nullopt when the
// task has vanished, which is a normal outcome, never an error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "base/types.hpp"

namespace tdctl::procfs {

/// Whole contents of a (small) file, or std::nullopt if it cannot be opened or read.
std::optional<std::string> read_file(const std::string& path);

/// How a /proc file is made: one record (stat, status, comm, schedstat, io:
/// the kernel writes it whole into the first read when it fits, so a read
/// that returns less than asked is the end), or many (maps: read to EOF).
enum class proc_records { one, many };

/// Whole contents of an open file, read with pread from offset 0 (a /proc
/// file is generated afresh by each read from its start). With
/// proc_records::one a short read ends it: no second read only to see EOF.
std::optional<std::string> read_fd(int fd, proc_records records = proc_records::many);

/// TIDs in /proc/PID/task, ascending. Empty if the process is gone.
std::vector<tid_t> list_tasks(pid_t pid);

/// Fields of /proc/PID/status (or /proc/PID/task/TID/status) that tdctl uses.
struct status_info {
    std::string name;               ///< Name: (comm, escaped by the kernel)
    char state = '?';               ///< first letter of State:
    pid_t tgid = 0, pid = 0, ppid = 0;
    pid_t tracer_pid = 0;           ///< TracerPid:, 0 when not traced
    uid_t uid_real = 0, uid_effective = 0;
    std::uint64_t cap_effective = 0;  ///< CapEff: bit mask
    std::uint64_t signals_caught = 0;   ///< SigCgt: bit (N-1) set when signal N has a handler (process-wide)
    std::uint64_t signals_ignored = 0;  ///< SigIgn: bit (N-1) set when signal N is SIG_IGN (process-wide)
    std::uint64_t signals_blocked = 0;  ///< SigBlk: bit (N-1) set when this task blocks signal N
    std::uint64_t signals_pending = 0;  ///< SigPnd: bit (N-1) set when signal N is pending for this task
    std::uint64_t vm_hwm_kb = 0;    ///< VmHWM:, kB (0 for kernel threads)
    std::uint64_t voluntary_ctxt_switches = 0;
    std::uint64_t nonvoluntary_ctxt_switches = 0;
    int threads = 0;                ///< Threads:
    /// NSpid: the task's ID in each PID namespace it belongs to, from the one
    /// this /proc was mounted for (the host's, for tdctl) to its own
    /// innermost one, which is what gettid() returns inside it. One entry
    /// when both are the same namespace; empty on kernels before 4.1.
    std::vector<pid_t> ns_pids;
};
status_info parse_status(std::string_view text);
std::optional<status_info> read_status(pid_t pid);
std::optional<status_info> read_task_status(pid_t pid, tid_t tid);

/// PF_* flags of stat_info::flags (the kernel's include/linux/sched.h):
/// in do_exit (runs no code of its own again); a kernel thread.
inline constexpr unsigned pf_exiting = 0x00000004;
inline constexpr unsigned pf_kthread = 0x00200000;

/// Fields of /proc/PID/stat or /proc/PID/task/TID/stat (proc(5) numbering in
/// comments). comm may contain spaces and ')': the fields after it are found
/// from the last ')'.
struct stat_info {
    pid_t pid = 0;                  ///< 1
    std::string comm;               ///< 2, without the parentheses
    char state = '?';               ///< 3
    pid_t ppid = 0;                 ///< 4
    unsigned flags = 0;             ///< 9, PF_* flags (pf_exiting, pf_kthread)
    std::uint64_t minflt = 0;       ///< 10
    std::uint64_t majflt = 0;       ///< 12
    std::uint64_t utime = 0;        ///< 14, clock ticks
    std::uint64_t stime = 0;        ///< 15, clock ticks
    long num_threads = 0;           ///< 20
    std::uint64_t starttime = 0;    ///< 22, clock ticks since boot
    int processor = -1;             ///< 39
};
std::optional<stat_info> parse_stat(std::string_view text);
std::optional<stat_info> read_stat(pid_t pid);
std::optional<stat_info> read_task_stat(pid_t pid, tid_t tid);

/// /proc/PID/task/TID/schedstat: the kernel's per-task scheduler accounting.
struct schedstat_info {
    std::uint64_t cpu_ns = 0;       ///< time spent on a CPU, ns (sum_exec_runtime)
    std::uint64_t wait_ns = 0;      ///< time spent runnable on a run queue, waiting for a CPU, ns
    std::uint64_t timeslices = 0;   ///< number of times it ran on a CPU
};
std::optional<schedstat_info> parse_schedstat(std::string_view text);
std::optional<schedstat_info> read_task_schedstat(pid_t pid, tid_t tid);

/// CPU time of the whole process `pid` (every thread, alive or ended), ns,
/// from its CPU-time clock (clock_getcpuclockid(3); no file, no permission
/// beyond seeing the PID); std::nullopt when it is gone.
std::optional<std::uint64_t> process_cpu_ns(pid_t pid);

/// /proc/PID/task/TID/io (bytes; the task's own counters).
struct io_info {
    std::uint64_t read_bytes = 0;   ///< bytes fetched from storage
    std::uint64_t write_bytes = 0;  ///< bytes sent to storage
};
std::optional<io_info> parse_io(std::string_view text);
std::optional<io_info> read_task_io(pid_t pid, tid_t tid);

/// /proc/PID/task/TID/syscall: the system call a blocked task is inside.
/// `number` is -1 when the task is blocked outside a system call; nullopt
/// when the task is running ("running"), gone, or the line is malformed.
struct syscall_info {
    long number = -1;                   ///< x86_64 system call number
    std::uint64_t args[6] = {};         ///< argument registers, in order
};
std::optional<syscall_info> parse_syscall(std::string_view text);
std::optional<syscall_info> read_task_syscall(pid_t pid, tid_t tid);

/// /proc/PID/task/TID/comm without the newline; "" if gone.
std::string read_comm(pid_t pid, tid_t tid);

/// /proc/PID/auxv as type -> value (AT_ENTRY, AT_BASE, ...).
std::map<std::uint64_t, std::uint64_t> parse_auxv(std::string_view bytes);
std::map<std::uint64_t, std::uint64_t> read_auxv(pid_t pid);

/// The first NUL-separated word of /proc/PID/cmdline, or the status Name.
std::string process_name(pid_t pid);

}  // namespace tdctl::procfs
