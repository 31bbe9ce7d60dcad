// The one place tdctl calls waitpid(): always with __WALL. tdctl waits on a
// running target one way: a blocking waitpid(-1) that the kernel ends with
// a status (a stop wakes the tracer directly; no SIGCHLD, descriptor or poll
// in between). Anything else that must end the wait — a deadline, a signal
// for the controller, input at the prompt — ends it through wake(), which
// makes a child that exits at once. A wait with a short bound (a streaming
// drain's few ms) sleeps on a SIGCHLD descriptor instead, so that a bound
// that passes costs no child. Stop-all waits on a known set of tasks by TID,
// sleeping on the descriptor between looks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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

/// How one waiter::wait_any() ended.
enum class wait_end {
    status,    ///< a status was taken (any_status::tid, ::status)
    woken,     ///< waiter::wake() was called since the last wait ended
    timeout,   ///< the bound passed
    no_child,  ///< no child at all: nothing is to come
};

/// What waiter::wait_any() returned with.
struct any_status {
    wait_end end = wait_end::timeout;
    tid_t tid;
    std::optional<wait_status> status;  ///< set for wait_end::status
};

class waiter {
public:
    /// Where a blocked wait cannot be woken (wakes_blocked_waits() false),
    /// the wait takes a look at least this often, ms; and stop-all looks for
    /// tasks blocked in vfork() this often.
    static constexpr int repoll_ms = 50;
    /// A wait_any() bounded by at most this many ms sleeps on the SIGCHLD
    /// descriptor (one poll, then one waitpid(-1, WNOHANG) per status or
    /// bound), not in a blocking waitpid(): a bound that passes ends it
    /// without a wake child.
    static constexpr int sliced_wait_ms = 50;

    /// Blocks SIGCHLD in the calling thread and opens a signalfd for it.
    /// Throws tdctl::error (os) on failure.
    waiter();
    ~waiter();
    waiter(const waiter&) = delete;
    waiter& operator=(const waiter&) = delete;

    /// One status from any traced task or child, waiting as cheaply as the
    /// kernel allows: one blocking waitpid(-1, __WALL). `timeout_ms` 0 only
    /// looks; -1 sets no bound; otherwise a timer thread ends the wait at
    /// that time (wait_end::timeout). wake(), from any thread, ends it
    /// (wait_end::woken): the wait blocked now, or the next one when none
    /// is. Where no wake child can be made (wakes_blocked_waits() false: a
    /// seccomp filter, RLIMIT_NPROC), it looks every repoll_ms instead; a
    /// bound of at most sliced_wait_ms is waited for that way too (a wake()
    /// ends it at once through an eventfd).
    any_status wait_any(int timeout_ms);

    /// From any thread: ends the wait_any() blocked now, or the next one.
    /// A blocking waitpid() is ended by a child process that exits at once
    /// (clone with CLONE_VM|CLONE_VFORK: no copy of the address space),
    /// whose exit every wait here swallows; a wait asleep on the SIGCHLD
    /// descriptor, by an eventfd written each time.
    static void wake();

    /// Whether wake() can end a blocked waitpid() here: made one wake child
    /// and reaped it (by its PID), once per process.
    static bool wakes_blocked_waits();

    /// Which descriptors wait_ready() found readable.
    struct ready_fds {
        bool sigchld = false;  ///< the SIGCHLD descriptor
        bool wake = false;     ///< wake_fd
    };
    /// Sleeps until the SIGCHLD descriptor or wake_fd (when >= 0) is readable,
    /// or timeout_ms (>= 0) passes; takes no status and reads neither. For
    /// stop-all, which takes statuses by TID and emptied the descriptor
    /// (drain_fd) before its last look.
    ready_fds wait_ready(int timeout_ms, int wake_fd = -1);

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
    /// never blocking; errors as try_wait().
    taken_status try_wait_any();

    /// The signalfd, readable when SIGCHLD is pending.
    int fd() const { return fd_.get(); }
    /// Reads and discards pending SIGCHLD notifications from the signalfd.
    void drain_fd();

    class deadline_timer;

private:
    /// wait_any() where no wake child can be made, or bounded by at most
    /// sliced_wait_ms: looks, then sleeps on the descriptor for at most
    /// repoll_ms, until `deadline_ns` (0: none).
    any_status wait_in_slices(std::int64_t deadline_ns);

    unique_fd fd_;
    /// The descriptor may be readable with nothing to take: wait_in_slices()
    /// drains it before its next look.
    bool stale_ = true;
    std::unique_ptr<deadline_timer> timer_;   // made at the first bounded wait
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
