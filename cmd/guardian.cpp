#include "cmd/guardian.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/change_journal.hpp"
#include "base/error.hpp"
#include "ptrace/process_memory.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::cmd {

namespace {

int g_guardian_pid = 0;

// Signals a user (or a job runner) sends to end tdctl; SIGCHLD says the
// tracer ended.
sigset_t guardian_signals()
{
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD})
        sigaddset(&set, sig);
    return set;
}

// The target's memory, opened ahead of need: when the tracer dies, the
// watcher has only a few reads and writes left to do.
struct target_handle {
    pid_t pid = 0;
    std::uint64_t start_time = 0;
    std::unique_ptr<ptrace::process_memory> memory;
};

// Opens /proc/PID/mem of the journal's target when that changed.
void follow_target(const journal_storage& storage, target_handle& target)
{
    pid_t pid = __atomic_load_n(&storage.pid, __ATOMIC_ACQUIRE);
    if (pid <= 0 || pid == target.pid)
        return;
    target = {};
    try {
        target.memory = std::make_unique<ptrace::process_memory>(pid);
        target.start_time = process_start_time(pid);
        target.pid = pid;
    } catch (const error& e) {
        target = {};  // tried again at the next turn
    }
}

// Returns once every thread of pid that was runnable has run since the call
// (its schedstat CPU time moved), or sleeps, or after 1 s: a thread left on
// a patch's own `ret` by the tracer's death has then run it (it is the very
// next instruction that thread executes).
void wait_until_threads_ran_on(pid_t pid)
{
    std::map<tid_t, std::uint64_t> before;
    for (tid_t t : procfs::list_tasks(pid))
        if (auto ss = procfs::read_task_schedstat(pid, t))
            before[t] = ss->cpu_ns;
    for (int round = 0; round < 1000 && !before.empty(); ++round) {
        std::erase_if(before, [pid](const auto& entry) {
            auto st = procfs::read_task_stat(pid, entry.first);
            auto ss = procfs::read_task_schedstat(pid, entry.first);
            return !st || !ss || st->state != 'R' || ss->cpu_ns != entry.second;
        });
        if (!before.empty())
            ::usleep(1000);
    }
}

// The tracer ended without putting back every change it journaled (it was
// SIGKILLed, or crashed): put the bytes, masks and flags back through
// /proc/PID/mem. Returns a sentence for the user, "" when there was nothing
// to do. Only the first call can find anything (the block is freed).
std::string restore_abandoned_changes(target_handle& target)
{
    static std::mutex once;
    std::lock_guard lock(once);
    journal_storage* storage = journal_storage::shared();
    if (storage == nullptr || storage->claimed == 0 || storage->pid <= 0 || storage->high_water == 0)
        return {};
    follow_target(*storage, target);
    pid_t pid = storage->pid;
    if (target.pid != pid || target.start_time != storage->start_time) {
        storage->claimed = 0;
        return fmt::format("process {} is gone; nothing to restore", pid);
    }
    try {
        auto t = change_journal::restore_abandoned(*storage, *target.memory, true);
        if (storage->high_water != 0) {
            wait_until_threads_ran_on(pid);
            t += change_journal::restore_abandoned(*storage, *target.memory);
        }
        if (t.restored + t.failed == 0)
            return {};
        return fmt::format("restored {} change(s) in process {}{}", t.restored, pid,
                           t.failed ? fmt::format("; {} could not be written", t.failed) : std::string());
    } catch (const error& e) {
        storage->claimed = 0;
        return fmt::format("could not restore process {}: {}", pid, e.what());
    }
}

// The watcher: a thread of the guardian that waits for the kernel to mark
// the tracer dead. That happens as the tracer's memory is released, before
// the kernel lets its tracees go, so the bytes are usually back before any
// thread of the target runs untraced. It keeps the target's memory open
// meanwhile, and says what it restored through g_watch_message.
std::mutex g_watch_mutex;
std::string g_watch_message;
std::thread g_watcher;
std::atomic<bool> g_stop_watcher{false};
target_handle g_target;

void watch_tracer(journal_storage& storage)
{
    while (!g_stop_watcher.load()) {
        follow_target(storage, g_target);
        auto state = storage.wait_for_tracer_death(20);
        if (state == journal_storage::tracer_state::alive)
            continue;
        if (state == journal_storage::tracer_state::dead) {
            std::string m = restore_abandoned_changes(g_target);
            std::lock_guard lock(g_watch_mutex);
            g_watch_message = std::move(m);
        }
        return;
    }
}

// The status the guardian ends with: the tracer's own.
int exit_code_of(pid_t tracer, int raw)
{
    if (g_watcher.joinable()) {
        g_stop_watcher = true;  // it is done, or the tracer never got to hold its mutex
        g_watcher.join();
    }
    std::string restored = restore_abandoned_changes(g_target);
    {
        std::lock_guard lock(g_watch_mutex);
        if (restored.empty())
            restored = g_watch_message;
    }
    if (WIFEXITED(raw)) {
        if (!restored.empty())
            std::fprintf(stderr, "tdctl: the tracer process %d ended without detaching; %s\n", tracer,
                         restored.c_str());
        return WEXITSTATUS(raw);
    }
    int sig = WTERMSIG(raw);
    std::fprintf(stderr, "tdctl: the tracer process %d was killed by signal %d (%s)%s%s\n", tracer, sig,
                 strsignal(sig), restored.empty() ? "" : "; ", restored.c_str());
    return 128 + sig;
}

// The OOM killer picks the highest score: make it this small process, whose
// death the tracer answers with a clean detach, rather than the tracer.
void prefer_guardian_for_oom()
{
    int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    (void)!::write(fd, "1000", 4);
    ::close(fd);
}

[[noreturn]] void guard(pid_t tracer, int signal_fd, bool own_session)
{
    for (;;) {
        pollfd p{signal_fd, POLLIN, 0};
        // SIGCHLD may be late or merged: look at the tracer at least every 200 ms.
        if (::poll(&p, 1, 200) < 0 && errno != EINTR)
            std::_Exit(2);
        signalfd_siginfo info{};
        while (::read(signal_fd, &info, sizeof info) == sizeof info) {
            int sig = static_cast<int>(info.ssi_signo);
            if (sig == SIGCHLD)
                continue;
            // si_code <= 0: sent by a process (kill, sigqueue, tgkill). The
            // terminal's Ctrl-C and Ctrl-\ carry SI_KERNEL and reach a tracer
            // in the same process group by themselves; a hangup goes to the
            // session leader alone, so it is always passed on (a second
            // SIGHUP or SIGTERM ends tdctl no differently than one).
            bool from_process = static_cast<int>(info.ssi_code) <= 0;
            if (from_process || own_session || sig == SIGHUP || sig == SIGTERM)
                ::kill(tracer, sig);
        }
        ptrace::taken_status taken;
        try {
            taken = ptrace::try_wait_child(tracer);
        } catch (const error& e) {
            std::fprintf(stderr, "tdctl: %s\n", e.what());
            std::_Exit(2);
        }
        if (taken.status)
            std::exit(exit_code_of(tracer, taken.status->raw()));
        if (taken.no_child)
            std::_Exit(2);
    }
}

}  // namespace

int guardian_pid() { return g_guardian_pid; }

void split_off_tracer(bool own_session)
{
    sigset_t set = guardian_signals(), old;
    if (int err = pthread_sigmask(SIG_BLOCK, &set, &old); err != 0)
        throw error::from_errno(err, "blocking signals in the guardian");
    // Every change the tracer makes is journaled here first, so that this
    // process can undo them should the tracer die without detaching.
    journal_storage& storage = journal_storage::create_shared();
    // Nothing buffered may be written twice.
    std::fflush(nullptr);
    pid_t parent = ::getpid();
    pid_t tracer = ::fork();
    if (tracer < 0)
        throw error::from_errno(errno, "fork");
    if (tracer == 0) {
        g_guardian_pid = parent;
        storage.hold_as_tracer();
        if (own_session)
            ::setsid();
        // The guardian's death is a hangup; if it died before this line, the
        // hangup is sent here by hand.
        ::prctl(PR_SET_PDEATHSIG, SIGHUP);
        if (::getppid() != parent)
            ::kill(::getpid(), SIGHUP);
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        return;
    }
    int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) {
        ::kill(tracer, SIGKILL);
        throw error::from_errno(errno, "signalfd in the guardian");
    }
    // The guardian holds nothing but the journal's shared block: no
    // descriptor of the target, no terminal state. It waits, passes signals
    // on, and ends as the tracer did.
    prefer_guardian_for_oom();
    g_watcher = std::thread(watch_tracer, std::ref(storage));
    guard(tracer, fd, own_session);
}

}  // namespace tdctl::cmd
