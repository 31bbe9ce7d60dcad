#include "ptrace/stop_all.hpp"

#include <chrono>
#include <csignal>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

namespace {

bool is_exec(long syscall_number)
{
    return syscall_number == SYS_execve || syscall_number == SYS_execveat;
}

// A task that never reports a stop after PTRACE_INTERRUPT is stuck in the
// kernel; bound the wait.
constexpr int stop_all_timeout_ms = 10000;
// How long stop-all waits before it looks for tasks blocked in vfork().
constexpr int vfork_check_ms = 50;

// Throws tdctl::error (target): `pending` did not stop in time.
[[noreturn]] void throw_stuck(const std::vector<tid_t>& pending)
{
    // A few TIDs and a count: a list of thousands helps nobody.
    constexpr std::size_t shown = 8;
    std::string stuck;
    for (std::size_t i = 0; i < pending.size() && i < shown; ++i)
        stuck += fmt::format(" {}", pending[i].value);
    if (pending.size() > shown)
        stuck += fmt::format(" and {} more", pending.size() - shown);
    throw error::target(fmt::format("{} tasks did not stop within {} s:{}", pending.size(),
                                    stop_all_timeout_ms / 1000, stuck));
}

}  // namespace

task_stopper::task_stopper(pid_t pid, task_table& tasks, waiter& wait, process_memory& memory, stop_router& router)
    : pid_(pid), tasks_(tasks), waiter_(wait), memory_(memory), router_(router)
{
}

void task_stopper::stop_running(bool peek, int cancel_fd)
{
    exec_under_way_ = false;
    std::vector<tid_t> pending;
    for (auto& [tid, t] : tasks_) {
        // An exiting task (e.g. a leader that called pthread_exit and waits as
        // a zombie for the rest) never stops again.
        if (t->is_stopped() || t->is_exiting())
            continue;
        if (!is_interrupt_sent(t->state()) && ptrace_call(PTRACE_INTERRUPT, tid, nullptr, nullptr) == 0)
            t->note_interrupt_sent();
        if (is_interrupt_sent(t->state()))
            pending.push_back(tid);
    }
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto next_vfork_check = start + std::chrono::milliseconds(vfork_check_ms);
    for (;;) {
        // Each task's status is taken by its TID: waitpid(-1) would make the
        // kernel walk every traced task per call, T times for T tasks.
        // The descriptor is emptied first, so a status that comes after the
        // pass wakes the poll below.
        waiter_.drain_fd();
        if (exec_under_way_)
            let_the_dying_go();
        take_stops_of(pending, peek);
        if (pending.empty())
            break;
        waiter_.wait_ready(vfork_check_ms, cancel_fd);
        throw_if_cancelled(cancel_fd, pid_);
        auto now = clock::now();
        if (now < next_vfork_check)
            continue;
        mark_blocked_tasks();
        next_vfork_check = now + std::chrono::milliseconds(vfork_check_ms);
        if (now - start >= std::chrono::milliseconds(stop_all_timeout_ms))
            throw_stuck(pending);
    }
}

void task_stopper::take_stops_of(std::vector<tid_t>& pending, bool peek)
{
    std::erase_if(pending, [this, peek](tid_t tid) {
        task* t = tasks_.find(tid);
        if (t == nullptr || !is_running(t->state()))
            return true;
        // At detach most tasks sit in their stop by now: read it without a
        // waitpid() (traced_process::begin_detach()).
        taken_status taken;
        std::optional<wait_status> peeked;
        if (peek)
            peeked = peek_stop(tid);
        if (peeked)
            taken = taken_status{tid, *peeked, false};
        else
            taken = waiter_.try_wait(tid);
        if (taken.no_child && exec_under_way_ && tid.value != pid_) {
            // The exec'ing thread took the leader's TID: its exec stop
            // comes under that TID (and is routed to the new image).
            taken = waiter_.try_wait(tid_t{pid_});
            if (taken.status)
                router_.route(tid_t{pid_}, *taken.status);
            return tasks_.find(tid) == nullptr;
        }
        if (taken.no_child) {
            t->note_gone();  // reaped elsewhere, or no longer ours
            return true;
        }
        if (!taken.status)
            return false;
        // Tasks born meanwhile are stopped at birth; nothing else to interrupt.
        router_.route(tid, *taken.status);
        t = tasks_.find(tid);
        return t == nullptr || !is_running(t->state());
    });
}

void task_stopper::mark_blocked_tasks()
{
    for (auto& [tid, t] : tasks_) {
        if (!is_running(t->state()))
            continue;
        auto st = procfs::read_task_status(pid_, tid);
        if (!st || st->state == 'Z' || st->state == 'X') {
            t->note_gone();
            log::debug("task {} is dead; its end is all that is to come", tid.value);
            continue;
        }
        auto sc = procfs::read_task_syscall(pid_, tid);
        if (!sc)
            continue;
        if (is_exec(sc->number) && st->state == 'D') {
            exec_under_way_ = true;
            log::debug("task {} is in an exec, waiting for the other threads to die", tid.value);
            continue;
        }
        if ((read_clone_flags(sc->number, sc->args[0], memory_).value_or(0) & CLONE_VFORK) != 0) {
            t->note_vfork_blocked();
            log::debug("task {} is blocked in vfork(); held until its child execs or exits", tid.value);
        }
    }
}

void task_stopper::let_the_dying_go()
{
    // An exec from any thread waits in the kernel (de_thread) until every
    // other thread is dead and released, the leader included. Each of them
    // has SIGKILL: one stopped is woken by it and stops again at its exit
    // (PTRACE_EVENT_EXIT), where it would hold the exec, and the stop of the
    // exec'ing thread, for ever; one dead is released only once its tracer
    // took its end. They only die, and the image their records live in goes
    // with the exec: take each one's new status, let it go on to its end.
    std::vector<tid_t> others;
    for (auto& [tid, t] : tasks_)
        if (!is_running(t->state()))
            others.push_back(tid);
    for (tid_t tid : others) {
        if (tasks_.find(tid) == nullptr)
            continue;  // gone with an exec routed meanwhile
        if (taken_status taken = waiter_.try_wait(tid); taken.status)
            router_.route(tid, *taken.status);
        task* t = tasks_.find(tid);
        if (t == nullptr || t->state() != task_state::exit_stopped)
            continue;
        if (int err = ptrace_call(PTRACE_CONT, tid, nullptr, nullptr); err == 0 || err == ESRCH)
            t->note_resumed();
        log::debug("task {} at its exit stop let go: an exec waits for it", tid.value);
    }
}

std::optional<std::uint64_t> read_clone_flags(long syscall_number, std::uint64_t arg0, target_memory& memory)
{
    // clone(2) passes flags in its first argument; clone3(2) passes a struct
    // clone_args whose first field is the flags.
    std::uint64_t flags = 0;
    if (syscall_number == SYS_vfork)
        return CLONE_VFORK;
    if (syscall_number == SYS_clone)
        return arg0;
    if (syscall_number == SYS_clone3 && memory.read_value(target_addr{arg0}, flags))
        return flags;
    return std::nullopt;
}

void throw_if_cancelled(int cancel_fd, pid_t pid)
{
    if (cancel_fd < 0)
        return;
    pollfd p{cancel_fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0)
        throw error::from_errno(EINTR, fmt::format("attaching to process {} was interrupted", pid));
}

}  // namespace tdctl::ptrace
