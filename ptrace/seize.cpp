#include "ptrace/seize.hpp"

#include <atomic>
#include <cerrno>
#include <climits>
#include <csetjmp>
#include <csignal>
#include <ctime>
#include <pthread.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "ptrace/attach_diagnosis.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

namespace {

void* as_ptr(long v) { return reinterpret_cast<void*>(v); }

// The two pipes between start_traced() and its child, both close-on-exec.
struct launch_pipes {
    unique_fd go_read, go_write;    // one byte from the parent once it has seized the child
    unique_fd err_read, err_write;  // the child's errno when exec fails; EOF when it succeeds
};

launch_pipes open_launch_pipes()
{
    launch_pipes p;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw error::from_errno(errno, "pipe");
    p.go_read.reset(fds[0]);
    p.go_write.reset(fds[1]);
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw error::from_errno(errno, "pipe");
    p.err_read.reset(fds[0]);
    p.err_write.reset(fds[1]);
    return p;
}

// The launched child after fork(): waits until the parent has seized it, then
// execs with the signal state the program would have had without us. Only
// async-signal-safe calls; a failed exec's errno goes to err_fd.
[[noreturn]] void exec_child(char* const* argv, const std::vector<std::string>& extra_env, int go_fd, int err_fd)
{
    char c;
    while (::read(go_fd, &c, 1) < 0 && errno == EINTR) {
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    for (const auto& e : extra_env)
        ::putenv(const_cast<char*>(e.c_str()));
    ::execvp(argv[0], argv);
    int e = errno;
    [[maybe_unused]] auto n = ::write(err_fd, &e, sizeof e);
    ::_exit(127);
}

// Seizes the launched child; on failure kills and reaps it and throws.
void seize_launched(pid_t pid, waiter& wait)
{
    tid_t leader{pid};
    if (int err = ptrace_call(PTRACE_SEIZE, leader, nullptr, as_ptr(trace_options)); err != 0) {
        ::kill(pid, SIGKILL);
        wait.wait_for(leader);  // reap it: it never ran a byte of the program
        throw error::from_errno(err, "cannot trace the launched program");
    }
}

// Passes the launched child's signals on until its exec event; throws
// tdctl::error (with the errno the child sent over err_read when its exec
// failed) if it exits first.
wait_status run_to_exec(pid_t pid, waiter& wait, const unique_fd& err_read, const std::string& program)
{
    // Until exec, only our own child code runs: pass its signals on.
    tid_t leader{pid};
    for (;;) {
        auto ws = wait.wait_for(leader);
        if (!ws || ws->has_ended()) {
            int e = 0;
            if (::read(err_read.get(), &e, sizeof e) == sizeof e)
                throw error::from_errno(e, fmt::format("cannot run {}", program));
            throw error::target(fmt::format("{} exited before it started", program));
        }
        if (ws->kind() == wait_kind::exec_event)
            return *ws;
        ptrace_call(PTRACE_CONT, leader, nullptr, as_ptr(ws->signal_to_deliver()));
    }
}

// ---- the bound on a seize (seize_bound)

// What the tick handler sees. One tracer thread seizes at a time.
volatile std::sig_atomic_t g_seize_in_call = 0;    // the number of the seize in its call, 0: none
volatile std::sig_atomic_t g_seen_by_last_tick = 0;
sigjmp_buf* volatile g_escape = nullptr;
std::atomic<int> g_bounds{0};                     // seize_bound objects alive

int bound_signal() { return SIGRTMIN + 2; }

void on_bound_tick(int)
{
    std::sig_atomic_t now = g_seize_in_call;
    if (now != 0 && now == g_seen_by_last_tick && g_escape != nullptr)
        siglongjmp(*g_escape, 1);
    g_seen_by_last_tick = now;
}

constexpr int escaped = -1;

// A leader's EPERM is tried again this many times, this far apart.
constexpr int leader_eperm_retries = 5;
constexpr int leader_eperm_pause_us = 2000;

// PTRACE_SEIZE, left after two ticks while a seize_bound is alive: errno,
// or `escaped`.
int bounded_seize(tid_t tid, long options)
{
    static std::sig_atomic_t count = 0;
    sigjmp_buf escape;
    if (sigsetjmp(escape, 0) != 0) {
        // Out of the handler by the jump: its signal is still blocked.
        g_seize_in_call = 0;
        g_escape = nullptr;
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, bound_signal());
        pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
        log_request(PTRACE_SEIZE, tid, nullptr, as_ptr(options), -1, EINTR);
        return escaped;
    }
    count = count == INT_MAX ? 1 : count + 1;
    g_escape = &escape;
    g_seize_in_call = count;
    errno = 0;
    long r = ::ptrace(PTRACE_SEIZE, tid.value, nullptr, as_ptr(options));
    int err = r == -1 ? errno : 0;
    g_seize_in_call = 0;
    g_escape = nullptr;
    log_request(PTRACE_SEIZE, tid, nullptr, as_ptr(options), r, err);
    return err;
}

}  // namespace

seize_bound::seize_bound()
{
    static bool installed = [] {
        // Installed once for good: a tick queued when the timer goes must
        // never meet the signal's default action (termination).
        struct sigaction sa {};
        sa.sa_handler = on_bound_tick;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        return ::sigaction(bound_signal(), &sa, nullptr) == 0;
    }();
    if (!installed)
        return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, bound_signal());
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = bound_signal();
    ev._sigev_un._tid = static_cast<pid_t>(::syscall(SYS_gettid));
    timer_t timer{};
    if (::timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) {
        log::debug("no bound on seizes: timer_create: errno {}", errno);
        return;
    }
    timer_ = timer;
    constexpr long tick_ns = 100'000'000;
    itimerspec every{{0, tick_ns}, {0, tick_ns}};
    armed_ = ::timer_settime(timer, 0, &every, nullptr) == 0;
    if (armed_)
        ++g_bounds;
}

seize_bound::~seize_bound()
{
    if (timer_ != nullptr)
        ::timer_delete(static_cast<timer_t>(timer_));
    if (armed_)
        --g_bounds;
}

bool seize_task(pid_t pid, tid_t tid, bool is_leader, long options)
{
    int err = g_bounds > 0 ? bounded_seize(tid, options) : ptrace_call(PTRACE_SEIZE, tid, nullptr, as_ptr(options));
    if (err == escaped)
        throw error(error_domain::target, exec_under_way,
                    fmt::format("process {} ({}) is in the middle of an exec; attach again once it is done", pid,
                                procfs::process_name(pid)));
    // A leader on its way through an exec from another thread (dead, its
    // TID about to be taken over) refuses for a moment: try again before
    // explaining. A lasting refusal costs a few milliseconds.
    for (int again = 0; err == EPERM && is_leader && again < leader_eperm_retries; ++again) {
        ::usleep(leader_eperm_pause_us);
        err = ptrace_call(PTRACE_SEIZE, tid, nullptr, as_ptr(options));
    }
    if (err == 0)
        return true;
    if (err == ESRCH && !is_leader)
        return false;  // a thread that died during the attach
    if (err == EPERM && !is_leader) {
        // A thread created during the attach is auto-attached through its
        // parent's PTRACE_O_TRACECLONE (its clone event will introduce it); a
        // thread that is exiting cannot be attached and needs not be.
        auto st = procfs::read_task_status(pid, tid);
        if (!st || st->tracer_pid == ::getpid() || st->state == 'Z' || st->state == 'X')
            return false;
    }
    throw error(error_domain::os, err, explain_seize_failure(pid, err));
}

started_program start_traced(const launch_options& opts, waiter& wait)
{
    if (opts.argv.empty())
        throw error::usage("no program to launch");
    launch_pipes pipes = open_launch_pipes();
    std::vector<char*> argv;  // built before fork(): the child may not allocate
    for (const auto& a : opts.argv)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    pid_t child = ::fork();
    if (child < 0)
        throw error::from_errno(errno, "fork");
    if (child == 0) {
        pipes.go_write.reset();
        pipes.err_read.reset();
        exec_child(argv.data(), opts.extra_env, pipes.go_read.get(), pipes.err_write.get());
    }
    pipes.go_read.reset();
    pipes.err_write.reset();
    seize_launched(child, wait);
    char go = 'g';
    [[maybe_unused]] auto n = ::write(pipes.go_write.get(), &go, 1);
    pipes.go_write.reset();
    return started_program{child, run_to_exec(child, wait, pipes.err_read, opts.argv[0])};
}

}  // namespace tdctl::ptrace
