#include "ptrace/waiter.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <poll.h>
#include <sched.h>
#include <cstddef>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

namespace {
// The wake child that is to be reaped (0: none) and whether a
// wait_until_woken() is blocked (or about to block) in waitpid(). The two are
// a Dekker pair with the caller's attention flag: the waiting thread sets
// `blocked` then reads attention; the waking thread sets attention then
// reads `blocked`. One of them sees the other's store, so a wake is never
// lost between the last look and the waitpid().
std::atomic<pid_t> wake_child{0};
std::atomic<bool> wait_blocked{false};

// Swallows the status of the pending wake child. True when `r` was it.
bool take_wake_child(pid_t r)
{
    pid_t expected = r;
    return r > 0 && wake_child.compare_exchange_strong(expected, 0);
}

int exit_at_once(void*)
{
    return 0;  // the clone wrapper ends the child with SYS_exit
}

// ThreadSanitizer's clone() interceptor runs its after-fork bookkeeping in
// the child; with CLONE_VM that is the parent's own state, which it then
// takes for a child's (every later thread start dies). Its builds copy.
#if defined(__SANITIZE_THREAD__)
constexpr int wake_child_shares_memory = 0;
#else
constexpr int wake_child_shares_memory = CLONE_VM;
#endif

// A child that exits at once, its PID stored in `slot` by the kernel before
// the child runs (CLONE_PARENT_SETTID), so no waitpid() can take its exit
// before it is known. CLONE_VFORK: this thread sleeps until the child has
// exited; CLONE_VM: nothing is copied. Returns the PID, or -1.
pid_t make_wake_child(std::atomic<pid_t>& slot)
{
    alignas(16) static thread_local std::byte stack[16 * 1024];
    static_assert(sizeof(std::atomic<pid_t>) == sizeof(pid_t));
    return ::clone(exit_at_once, stack + sizeof stack,
                   wake_child_shares_memory | CLONE_VFORK | CLONE_PARENT_SETTID | SIGCHLD, nullptr,
                   reinterpret_cast<pid_t*>(&slot));
}

long long now_ms()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// The only waitpid() call: `which` as waitpid takes it (a TID, or -1 for any
// child), __WALL always added to `options`. EINTR is retried; a blocking call
// returns only with a status or ECHILD.
taken_status take_status(pid_t which, int options)
{
    for (;;) {
        int status = 0;
        pid_t r = ::waitpid(which, &status, __WALL | options);
        if (r > 0) {
            if (take_wake_child(r)) {
                if ((options & WNOHANG) == 0)
                    return taken_status{tid_t{r}, std::nullopt, false};  // woken: no status
                continue;
            }
            if (take_unconsumed_stop(tid_t{r}, status)) {
                log::debug("wait: task {} stop already read by PTRACE_GETSIGINFO", r);
                continue;
            }
            auto ws = wait_status::decode(status);
            if (log::debug_enabled())  // the arguments are built even when off
                log::debug("wait: task {} {}", r, ws.to_string());
            return taken_status{tid_t{r}, ws, false};
        }
        if (r == 0)
            return taken_status{};
        if (errno == EINTR)
            continue;
        if (errno == ECHILD)
            return taken_status{{}, std::nullopt, true};
        throw error::from_errno(errno, which < 0 ? std::string("waitpid") : fmt::format("waitpid({})", which));
    }
}
}  // namespace

waiter::waiter()
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    if (int err = pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0)
        throw error::from_errno(err, "blocking SIGCHLD");
    int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        throw error::from_errno(errno, "signalfd(SIGCHLD)");
    fd_.reset(fd);
}

void waiter::drain_fd()
{
    // SIGCHLD is a standard signal: at most one is pending, so one read
    // empties the descriptor.
    signalfd_siginfo info[4];
    (void)::read(fd_.get(), info, sizeof info);
}

std::optional<std::pair<tid_t, wait_status>> waiter::wait_any(int timeout_ms, int wake_fd)
{
    long long deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    for (;;) {
        // Empty the descriptor before the look, never after it: a status
        // that becomes waitable after this drain raises a SIGCHLD of its own,
        // and one whose SIGCHLD the drain swallowed is found by the look. A
        // burst of statuses needs one drain, at its start; after a look finds
        // nothing, the next call drains again (its caller slept on the
        // descriptor, or looks again soon).
        if (stale_) {
            drain_fd();
            stale_ = false;
        }
        taken_status taken = try_wait_any();
        if (taken.status)
            return std::pair{taken.tid, *taken.status};
        stale_ = true;
        if (taken.no_child)
            return std::nullopt;  // no child at all: nothing is to come
        int wait_ms = repoll_ms;
        if (deadline >= 0) {
            long long left = deadline - now_ms();
            if (left <= 0)
                return std::nullopt;
            wait_ms = static_cast<int>(std::min<long long>(left, repoll_ms));
        }
        pollfd p[2] = {{fd_.get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
        int n = ::poll(p, wake_fd >= 0 ? 2 : 1, wait_ms);
        if (n < 0 && errno != EINTR)
            throw error::from_errno(errno, "poll on SIGCHLD");
        if (wake_fd >= 0 && (p[1].revents & POLLIN) != 0)
            return std::nullopt;
    }
}

void waiter::wait_ready(int timeout_ms, int wake_fd)
{
    pollfd p[2] = {{fd_.get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    if (::poll(p, wake_fd >= 0 ? 2 : 1, timeout_ms) < 0 && errno != EINTR)
        throw error::from_errno(errno, "poll on SIGCHLD");
}

waiter::woken_by waiter::wait_until_woken(const std::atomic<bool>& attention,
                                           std::optional<std::pair<tid_t, wait_status>>& got)
{
    // SIGCHLDs pile up on the descriptor meanwhile: the next wait_any() drains it.
    stale_ = true;
    wait_blocked.store(true);
    if (attention.load()) {
        wait_blocked.store(false);
        return woken_by::wake;
    }
    taken_status taken = take_status(-1, 0);
    wait_blocked.store(false);
    if (taken.status) {
        got.emplace(taken.tid, *taken.status);
        return woken_by::status;
    }
    return taken.no_child ? woken_by::no_child : woken_by::wake;
}

bool waiter::wake_blocked_wait()
{
    if (!wait_blocked.load() || wake_child.load() != 0)
        return false;
    pid_t r = make_wake_child(wake_child);
    if (r < 0) {
        wake_child.store(0);
        return false;
    }
    return true;
}

bool waiter::can_wake_blocked_wait()
{
    std::atomic<pid_t> probe{0};
    pid_t r = make_wake_child(probe);
    if (r <= 0)
        return false;
    taken_status taken = take_status(r, 0);
    return taken.status && taken.status->kind() == wait_kind::exited;
}

std::optional<wait_status> waiter::wait_for(tid_t tid)
{
    if (tid.value <= 0)
        return std::nullopt;  // waitpid(0 or -N) would take another task's status
    return take_status(tid.value, 0).status;
}

taken_status waiter::try_wait(tid_t tid)
{
    if (tid.value <= 0)
        return taken_status{{}, std::nullopt, true};
    return take_status(tid.value, WNOHANG);
}

taken_status waiter::try_wait_any()
{
    return take_status(-1, WNOHANG);
}

std::optional<wait_status> peek_stop(tid_t tid)
{
    siginfo_t si{};
    if (tid.value <= 0 || ptrace_call(PTRACE_GETSIGINFO, tid, nullptr, &si) != 0)
        return std::nullopt;  // not in a ptrace-stop (running, exiting, gone)
    int code = 0;
    if (si.si_code >= 0x100 && (si.si_code & 0xff) == si.si_signo) {
        // A ptrace event stop: the kernel's siginfo carries exactly the
        // status word's upper bits (ptrace_do_notify).
        switch (si.si_code >> 8) {
        case PTRACE_EVENT_STOP:
            if (si.si_signo != SIGTRAP)
                return std::nullopt;  // a group-stop: PTRACE_LISTEN needs it taken by waitpid
            break;
        case PTRACE_EVENT_CLONE:
        case PTRACE_EVENT_FORK:
        case PTRACE_EVENT_VFORK:
        case PTRACE_EVENT_EXIT:
            break;
        default:
            return std::nullopt;  // exec (the TID changes), vfork-done: by waitpid
        }
        code = si.si_code;
    } else if (si.si_signo == SIGTRAP && si.si_code == (SIGTRAP | 0x80)) {
        return std::nullopt;  // a syscall-stop (never requested): by waitpid
    } else {
        code = si.si_signo;  // a signal-delivery-stop
    }
    int raw = 0x7f | (code << 8);
    note_unconsumed_stop(tid, raw);
    auto ws = wait_status::decode(raw);
    if (log::debug_enabled())
        log::debug("peek: task {} {}", tid.value, ws.to_string());
    return ws;
}

taken_status try_wait_child(pid_t child)
{
    return take_status(child, WNOHANG);
}

}  // namespace tdctl::ptrace
