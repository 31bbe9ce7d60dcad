// The body of traced_process::stop_all(): interrupt every running task and
// take each one's stop by its TID (waitpid(-1) would make the kernel walk
// every traced task per call, T times for T tasks).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ptrace/process_memory.hpp"
#include "ptrace/stop_router.hpp"
#include "ptrace/task_table.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::ptrace {

class task_stopper {
public:
    /// Parts of the traced process `pid`, owned by it and outliving this.
    task_stopper(pid_t pid, task_table& tasks, waiter& wait, process_memory& memory, stop_router& router);

    /// Interrupts every running task (PTRACE_INTERRUPT) and waits until each
    /// is stopped, exiting, blocked in vfork() or dead (found
    /// from /proc/PID/task/TID/syscall and status after 50 ms) or gone; each status goes
    /// through the router. `peek`: read each stop with peek_stop() first
    /// (detach). Throws tdctl::error (target) naming the tasks that did not
    /// stop within 10 s, and (os, EINTR) as soon as cancel_fd (>= 0) is
    /// readable.
    void stop_running(bool peek, int cancel_fd);

private:
    /// Takes, by TID, the status of each task in `pending` that has one and
    /// routes it; drops from `pending` the tasks that are stopped, ending,
    /// in vfork() or gone. Never blocks.
    void take_stops_of(std::vector<tid_t>& pending, bool peek);
    /// Marks the running tasks that cannot stop: blocked in vfork() (held
    /// until the child execs or exits), or dead (a zombie: /proc state Z or
    /// X, past an exit no stop of which is to come; its end is reaped by
    /// the wait loop or detach).
    void mark_blocked_tasks();

    pid_t pid_;
    task_table& tasks_;
    waiter& waiter_;
    process_memory& memory_;
    stop_router& router_;
};

/// The clone flags of the clone(2), clone3(2) or vfork(2) a task is in (from
/// its syscall number and first argument, /proc/PID/task/TID/syscall; for
/// clone3 the first field of its struct clone_args, read from `memory`);
/// std::nullopt for any other call or when clone_args cannot be read.
std::optional<std::uint64_t> read_clone_flags(long syscall_number, std::uint64_t arg0, target_memory& memory);

/// Throws tdctl::error (os, EINTR) naming process pid when cancel_fd (>= 0)
/// is readable (e.g. the controller's signal descriptor); returns otherwise.
void throw_if_cancelled(int cancel_fd, pid_t pid);

}  // namespace tdctl::ptrace
