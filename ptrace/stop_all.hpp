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
    /// in vfork() or gone. While an exec is under way, a task whose TID is
    /// gone is the exec'ing one: its stop is taken under the leader's TID.
    /// Never blocks.
    void take_stops_of(std::vector<tid_t>& pending, bool peek);
    /// Marks the running tasks that cannot stop: blocked in vfork() (held
    /// until the child execs or exits), or dead (a zombie: /proc state Z or
    /// X, past an exit no stop of which is to come; its end is reaped by
    /// the wait loop or detach).
    /// Also notes an exec under way (exec_under_way_): a task interrupted
    /// 50 ms ago still inside execve(2) or execveat(2), in an uninterruptible
    /// wait (state D): the kernel's wait for the other threads to die. (A
    /// slow read of the new program's file looks the same: the cost is that
    /// a thread at its exit stop meanwhile is let go unexamined.)
    void mark_blocked_tasks();
    /// While an exec is under way: takes every stopped task's new status
    /// (the exit stop the exec's SIGKILL leads to, or its end) and lets each
    /// one at its exit stop die (PTRACE_CONT), so the exec can end; its stop
    /// then comes under the leader's TID (take_stops_of()).
    void let_the_dying_go();

    pid_t pid_;
    task_table& tasks_;
    waiter& waiter_;
    process_memory& memory_;
    stop_router& router_;
    bool exec_under_way_ = false;  // found by mark_blocked_tasks(), this stop_running()
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
