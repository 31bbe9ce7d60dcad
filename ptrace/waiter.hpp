// The one place tdctl calls waitpid(): always with __WALL. Readiness comes
// from a signalfd for SIGCHLD, so the same descriptor can sit in the command
// loop's poll() next to the terminal; or, while the target runs, one blocking
// waitpid() per stop that another thread can end (wait_until_woken).
#pragma once

#include <atomic>
#include <optional>
#include <utility>

#include "base/types.hpp"
#include "base/unique_fd.hpp"
#include "ptrace/wait_status.hpp"

namespace tdctl::ptrace {

/// What one non-blocking look for a status found.
struct taken_status {
    tid_t tid;                          ///< the task the status is from (set with `status`)
    std::optional<wait_status> status;  ///< std::nullopt: no status pending now
    bool no_child = false;              ///< ECHILD: no such child (any more); no status is to come
};

class waiter {
public:
    /// The longest any wait sleeps on the SIGCHLD descriptor before it asks
    /// waitpid() again, ms: a SIGCHLD that comes late, is merged with another
    /// or never comes (one per status is not promised) stalls nothing longer.
    static constexpr int repoll_ms = 50;

    /// Blocks SIGCHLD in the calling thread and opens a signalfd for it.
    /// Throws tdctl::error (os) on failure.
    waiter();

    /// One status from any traced task or child: waitpid(-1, __WALL|WNOHANG),
    /// then waits on the signalfd for at most timeout_ms (-1: no bound — only
    /// for callers that know a status must come, such as a task we just
    /// killed). std::nullopt on timeout, when there is no child at all, or
    /// as soon as wake_fd (when >= 0, e.g. the controller's signal fd) is
    /// readable; the caller tells these apart.
    std::optional<std::pair<tid_t, wait_status>> wait_any(int timeout_ms, int wake_fd = -1);

    /// Sleeps until the SIGCHLD descriptor or wake_fd (when >= 0) is readable,
    /// or timeout_ms (>= 0) passes; takes no status and drains nothing. For a
    /// caller that takes statuses by TID and emptied the descriptor (drain_fd)
    /// before its last look.
    void wait_ready(int timeout_ms, int wake_fd = -1);

    /// What wait_until_woken() returned with.
    enum class woken_by { status, wake, no_child };

    /// One status from any traced task or child with one blocking
    /// waitpid(-1, __WALL): the cheapest wait there is (a stop wakes the
    /// caller directly; no SIGCHLD, descriptor or poll in between). It ends
    /// without a status (woken_by::wake) when `attention` is already set when
    /// it starts, or when another thread sets it and then calls
    /// wake_blocked_wait(); woken_by::no_child when there is no child at
    /// all. `got` holds the status for woken_by::status.
    woken_by wait_until_woken(const std::atomic<bool>& attention, std::optional<std::pair<tid_t, wait_status>>& got);

    /// From any thread, after setting the `attention` flag a wait_until_woken()
    /// may be blocked on: ends that wait. It makes a child process that exits
    /// at once (clone with CLONE_VM|CLONE_VFORK: no copy of the address space)
    /// and whose exit that waitpid() then returns; the child's status is
    /// swallowed by every wait here. At most one such child is pending. False
    /// when no wait was blocked, a child is already pending, or clone failed
    /// (EAGAIN at RLIMIT_NPROC, a seccomp filter): call again later.
    static bool wake_blocked_wait();

    /// Whether wake_blocked_wait() can work here: makes one wake child and
    /// reaps it (by its PID). Call once, before relying on it.
    static bool can_wake_blocked_wait();

    /// waitpid(tid, __WALL), blocking: only for a task whose next status is
    /// known to be imminent (a new clone's first stop, a single-step, a child
    /// just sent SIGKILL). std::nullopt when tid is no child of ours (ECHILD).
    std::optional<wait_status> wait_for(tid_t tid);

    /// waitpid(tid, __WALL|WNOHANG): tid's status if it has one now, never
    /// blocking. EINTR is retried; throws tdctl::error (os) on other errors
    /// than ECHILD (reported as no_child, as is a tid <= 0: never a
    /// waitpid(0), which would take any child's status).
    taken_status try_wait(tid_t tid);

    /// waitpid(-1, __WALL|WNOHANG): any child's status if one has one now,
    /// never blocking; errors as try_wait(). Leaves the signalfd as it is.
    taken_status try_wait_any();

    /// True while the last look of wait_any() found a status: more may be
    /// waiting whose SIGCHLD that call's drain took, so a caller should look
    /// again before it sleeps on the descriptor.
    bool may_have_more() const { return !stale_; }
    /// The signalfd, readable when SIGCHLD is pending (for poll()).
    int fd() const { return fd_.get(); }

    /// Reads and discards pending SIGCHLD notifications from the signalfd.
    void drain_fd();

private:
    unique_fd fd_;
    /// The descriptor may be readable with nothing to take (set when a look
    /// found no status): wait_any() drains it before its next look.
    bool stale_ = true;
};

/// The stop a traced task sits in, read with PTRACE_GETSIGINFO instead of
/// waitpid(): the status waitpid() would give (event stops from the
/// siginfo's si_code, signal-delivery-stops from si_signo). One O(1) request,
/// where waitpid(TID) walks every traced task on older kernels and is the
/// slow call on a loaded host. std::nullopt when the task is not in a
/// ptrace-stop, and for stops better taken by waitpid (group-stops, exec,
/// vfork-done, syscall-stops). The status stays with the kernel until the
/// task is resumed; it is noted (note_unconsumed_stop), so a later waitpid()
/// that returns it drops it instead of handing it out twice.
std::optional<wait_status> peek_stop(tid_t tid);

/// waitpid(child, __WALL|WNOHANG) for a child process tdctl does not trace
/// (the tracer, as its guardian sees it): its status if it has one now,
/// never blocking, with no signalfd (the caller has its own). EINTR is
/// retried; ECHILD is no_child; throws tdctl::error (os) on other errors.
taken_status try_wait_child(pid_t child);

}  // namespace tdctl::ptrace
