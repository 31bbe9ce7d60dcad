#include "ptrace/waiter.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cerrno>
#include <csignal>
#include <poll.h>
#include <sched.h>
#include <cstddef>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

namespace {
// The wake child that is to be reaped (0: none), whether a wait_any() is
// blocked (or about to block) in waitpid(), and whether a wake is asked
// for. `blocked` and `attention` are a Dekker pair: the waiting thread sets
// `blocked` then reads `attention` (or the clock, for a deadline); the waking
// thread sets `attention` (or finds the deadline passed) then reads
// `blocked`. One of them sees the other's store, so a wake is never lost
// between the last look and the waitpid().
std::atomic<pid_t> wake_child{0};
std::atomic<bool> wait_blocked{false};
std::atomic<bool> attention{false};
// An eventfd every wake() writes after setting `attention`: a wait that
// sleeps on the SIGCHLD descriptor (wait_in_slices) sleeps on it too. Made
// by the first waiter; -1 until then.
std::atomic<int> wake_event{-1};

// Empties the wake eventfd (non-blocking).
void drain_wake_event()
{
    std::uint64_t count = 0;
    if (int fd = wake_event.load(); fd >= 0)
        (void)::read(fd, &count, sizeof count);
}

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

std::int64_t now_ns()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Makes a wake child if a wait is blocked and none is pending. False when no
// wait is blocked, one is pending already, or clone failed.
bool wake_blocked_wait()
{
    if (!wait_blocked.load() || wake_child.load() != 0)
        return false;
    if (make_wake_child(wake_child) < 0) {
        wake_child.store(0);
        return false;
    }
    return true;
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

// Ends a blocked wait_any() when its deadline passes. The deadline is an
// atomic the waiting thread sets without a system call; this thread is told
// only when a deadline comes sooner than the one it sleeps for.
class waiter::deadline_timer {
public:
    deadline_timer()
    {
        // Every signal stays blocked in this thread: they are the tracer's to take.
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        thread_ = std::thread([this] { run(); });
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    ~deadline_timer()
    {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        cv_.notify_one();
        thread_.join();
    }
    deadline_timer(const deadline_timer&) = delete;
    deadline_timer& operator=(const deadline_timer&) = delete;

    /// The wait about to block ends at `deadline_ns` (CLOCK_MONOTONIC; 0: none).
    /// A deadline less than notify_slack_ns sooner than the one the thread
    /// sleeps for does not wake it: callers round their waits up to whole
    /// milliseconds, so a loop's deadlines jitter by up to one, and telling
    /// the thread each time cost two futex calls per wait.
    void arm(std::int64_t deadline_ns)
    {
        std::int64_t before = armed_.exchange(deadline_ns);
        if (deadline_ns != 0 && (before == 0 || deadline_ns + notify_slack_ns <= before)) {
            std::lock_guard lock(mutex_);
            cv_.notify_one();
        }
    }

private:
    void run()
    {
        std::unique_lock lock(mutex_);
        while (!stopping_) {
            std::int64_t due = armed_.load();
            if (due == 0) {
                cv_.wait(lock);
                continue;
            }
            std::int64_t left = due - now_ns();
            if (left > 0) {
                cv_.wait_for(lock, std::chrono::nanoseconds(left));
                continue;
            }
            // Passed: wake the wait until it has ended (it may not have
            // blocked yet, or a wake child may already be on its way).
            if (armed_.load() == due && wait_blocked.load() && !wake_blocked_wait()) {
                cv_.wait_for(lock, std::chrono::milliseconds(1));
                continue;
            }
            std::int64_t expected = due;
            armed_.compare_exchange_strong(expected, 0);
        }
    }

    static constexpr std::int64_t notify_slack_ns = 1000000;

    std::atomic<std::int64_t> armed_{0};
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stopping_ = false;  // guarded by mutex_
    std::thread thread_;
};

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
    // One for the process, as wake() is: kept open until exit.
    if (wake_event.load() < 0) {
        int event = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        int none = -1;
        if (event >= 0 && !wake_event.compare_exchange_strong(none, event))
            ::close(event);
    }
}

waiter::~waiter() = default;

void waiter::drain_fd()
{
    // SIGCHLD is a standard signal: at most one is pending, so one read
    // empties the descriptor.
    signalfd_siginfo info[4];
    (void)::read(fd_.get(), info, sizeof info);
}

any_status waiter::wait_any(int timeout_ms)
{
    if (timeout_ms == 0) {
        taken_status taken = try_wait_any();
        if (taken.status)
            return any_status{wait_end::status, taken.tid, taken.status};
        return any_status{taken.no_child ? wait_end::no_child : wait_end::timeout, {}, std::nullopt};
    }
    const std::int64_t deadline = timeout_ms < 0 ? 0 : now_ns() + std::int64_t{timeout_ms} * 1000000;
    // A short bound is expected to pass (a streaming drain's every few ms):
    // a poll on the descriptor ends it for a system call, where the timer
    // would make a wake child each time (a process made and reaped).
    if (!wakes_blocked_waits() || (timeout_ms > 0 && timeout_ms <= sliced_wait_ms))
        return wait_in_slices(deadline);
    if (deadline != 0 && !timer_)
        timer_ = std::make_unique<deadline_timer>();
    if (timer_)
        timer_->arm(deadline);
    for (;;) {
        wait_blocked.store(true);
        if (attention.exchange(false)) {
            wait_blocked.store(false);
            return any_status{wait_end::woken, {}, std::nullopt};
        }
        if (deadline != 0 && now_ns() >= deadline) {
            wait_blocked.store(false);
            return any_status{wait_end::timeout, {}, std::nullopt};
        }
        taken_status taken = take_status(-1, 0);
        wait_blocked.store(false);
        if (taken.status)
            return any_status{wait_end::status, taken.tid, taken.status};
        if (taken.no_child)
            return any_status{wait_end::no_child, {}, std::nullopt};
        // A wake child: for this wait (a wake, the deadline), or a late one
        // made for a wait that had already ended (then wait on).
    }
}

any_status waiter::wait_in_slices(std::int64_t deadline_ns)
{
    for (;;) {
        // Empty the descriptor before the look, never after it: a status
        // that becomes waitable after this drain raises a SIGCHLD of its own,
        // and one whose SIGCHLD the drain swallowed is found by the look.
        if (stale_) {
            drain_fd();
            stale_ = false;
        }
        taken_status taken = try_wait_any();
        if (taken.status)
            return any_status{wait_end::status, taken.tid, taken.status};
        if (taken.no_child)
            return any_status{wait_end::no_child, {}, std::nullopt};
        if (attention.exchange(false))
            return any_status{wait_end::woken, {}, std::nullopt};
        std::int64_t wait_ms = repoll_ms;
        if (deadline_ns != 0) {
            std::int64_t left = deadline_ns - now_ns();
            if (left <= 0)
                return any_status{wait_end::timeout, {}, std::nullopt};
            wait_ms = std::min<std::int64_t>((left + 999999) / 1000000, repoll_ms);
        }
        const ready_fds ready = wait_ready(static_cast<int>(wait_ms), wake_event.load());
        // Only what the poll found readable is read: an idle slice costs
        // the look and the poll. A SIGCHLD left in the descriptor (after
        // another wait took its status) only ends a poll early: the next
        // round drains it.
        stale_ = ready.sigchld;
        if (ready.wake)
            drain_wake_event();  // before the next look at `attention`
    }
}

waiter::ready_fds waiter::wait_ready(int timeout_ms, int wake_fd)
{
    pollfd p[2] = {{fd_.get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    if (::poll(p, wake_fd >= 0 ? 2 : 1, timeout_ms) < 0) {
        if (errno != EINTR)
            throw error::from_errno(errno, "poll on SIGCHLD");
        return {true, wake_fd >= 0};  // nothing known: read both
    }
    return {(p[0].revents & POLLIN) != 0, wake_fd >= 0 && (p[1].revents & POLLIN) != 0};
}

void waiter::wake()
{
    attention.store(true);
    // A wait that is not blocked now sees the flag before it blocks; one
    // that is gets a wake child (made again at the next wake if this fails);
    // one asleep on the descriptors wakes on the eventfd.
    if (int fd = wake_event.load(); fd >= 0) {
        const std::uint64_t one = 1;
        (void)!::write(fd, &one, sizeof one);
    }
    (void)wake_blocked_wait();
}

bool waiter::wakes_blocked_waits()
{
    static const bool works = [] {
        std::atomic<pid_t> probe{0};
        pid_t r = make_wake_child(probe);
        if (r <= 0)
            return false;
        taken_status taken = take_status(r, 0);
        return taken.status && taken.status->kind() == wait_kind::exited;
    }();
    return works;
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
