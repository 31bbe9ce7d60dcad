#include "ptrace/attach_diagnosis.hpp"

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <linux/capability.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ptrace/procfs.hpp"

namespace tdctl::ptrace {

namespace {

pid_t g_controller_process = 0;

constexpr std::uint64_t sigkill_bit = std::uint64_t{1} << (SIGKILL - 1);
constexpr long sys_execve = 59, sys_execveat = 322;  // x86_64

// What the message says of a process in a transition, or nullopt.
// How long precheck_attach() waits for a dead leader with threads to change:
// an exec's de_thread takes well under this.
constexpr int zombie_leader_tries = 100;
constexpr int zombie_leader_pause_us = 2000;

std::string transition_text(pid_t pid, const std::string& name, process_transition t)
{
    if (t == process_transition::exiting)
        return fmt::format("process {} ({}) is exiting: there is nothing left to attach to", pid, name);
    return fmt::format("process {} ({}) is in the middle of an exec; attach again once it is done", pid, name);
}

// The refusal of precheck_attach() for a plain message.
std::optional<attach_refusal> refused(std::string why)
{
    return attach_refusal{std::move(why), std::nullopt};
}

std::string tracer_text(pid_t tracer)
{
    std::string name = procfs::process_name(tracer);
    return name.empty() ? fmt::format("PID {}", tracer) : fmt::format("PID {} ({})", tracer, name);
}

}  // namespace

void note_controller_process(pid_t pid) { g_controller_process = pid; }

std::optional<process_transition> process_in_transition(pid_t pid)
{
    bool killed = false;
    for (tid_t tid : procfs::list_tasks(pid)) {
        if (auto sc = procfs::read_task_syscall(pid, tid); sc && (sc->number == sys_execve || sc->number == sys_execveat))
            if (auto st = procfs::read_task_status(pid, tid); st && (st->signals_pending & sigkill_bit) == 0)
                return process_transition::execing;
        auto st = procfs::read_task_status(pid, tid);
        auto stat = procfs::read_task_stat(pid, tid);
        const bool zombie_leader = tid.value == pid && st && st->state == 'Z';
        if (!zombie_leader && ((st && (st->signals_pending & sigkill_bit) != 0) ||
                               (stat && (stat->flags & procfs::pf_exiting) != 0)))
            killed = true;
    }
    return killed ? std::optional(process_transition::exiting) : std::nullopt;
}

std::optional<attach_refusal> precheck_attach(pid_t pid) { return precheck_attach(pid, procfs::read_status); }

std::optional<attach_refusal> precheck_attach(pid_t pid, const status_reader& read_status)
{
    if (pid <= 0)
        return refused(fmt::format("{} is not a valid process ID", pid));
    if (pid == ::getpid() || (g_controller_process != 0 && pid == g_controller_process))
        return refused(fmt::format("process {} is tdctl itself; a process cannot trace itself", pid));
    auto status = read_status(pid);
    if (!status)
        return refused(fmt::format("no such process: {}", pid));
    if (status->tgid != 0 && status->tgid != pid)
        return refused(fmt::format("{} is a thread of process {}; attach to the process instead", pid, status->tgid));
    if (auto stat = procfs::read_task_stat(pid, tid_t{pid}); stat && (stat->flags & procfs::pf_kthread) != 0)
        return refused(fmt::format("process {} ({}) is a kernel thread and cannot be traced", pid, status->name));
    // An exec from another thread passes through a dead leader with threads
    // (it waits for the leader to be reaped), and a task being released
    // reads "Threads: 0" (its signal handlers are gone; an exec's de_thread
    // releases the old leader just after handing its PID on): give either a
    // moment to end. A zombie process keeps its count of 1.
    for (int tries = 0; status->state == 'Z' && status->threads != 1 && tries < zombie_leader_tries; ++tries) {
        ::usleep(zombie_leader_pause_us);
        status = read_status(pid);
        if (!status)
            return refused(fmt::format("no such process: {}", pid));
    }
    if (status->state == 'Z' && status->threads > 1)
        if (auto t = process_in_transition(pid))
            return attach_refusal{transition_text(pid, status->name, *t), t};
    if (status->state == 'Z' && status->threads > 1)
        return refused(fmt::format("the main thread of process {} ({}) has exited (pthread_exit) while {} other "
                                   "threads run; tdctl cannot attach to such a process yet",
                                   pid, status->name, status->threads - 1));
    if (status->state == 'Z')
        return refused(
            fmt::format("process {} ({}) is a zombie: it has exited and cannot be traced", pid, status->name));
    if (status->tracer_pid != 0) {
        if (status->tracer_pid == ::getpid())
            return refused(fmt::format("process {} is already traced by this tdctl", pid));
        return refused(fmt::format("process {} ({}) is already traced by {}; a process can have only one tracer — "
                                   "detach that one first",
                                   pid, status->name, tracer_text(status->tracer_pid)));
    }
    return std::nullopt;
}

std::string explain_seize_failure(pid_t pid, int err)
{
    auto status = procfs::read_status(pid);
    if (err == ESRCH || !status)
        return fmt::format("no such process: {}", pid);
    if (err == EPERM) {
        if (auto t = process_in_transition(pid))
            return transition_text(pid, status->name, *t);
        if (status->tracer_pid != 0)
            return fmt::format("cannot attach to process {} ({}): already traced by {}", pid, status->name,
                               tracer_text(status->tracer_pid));
        auto self = procfs::read_status(::getpid());
        bool has_cap = self && (self->cap_effective & (1ULL << CAP_SYS_PTRACE)) != 0;
        if (self && status->uid_real != self->uid_effective && !has_cap)
            return fmt::format("cannot attach to process {} ({}): it belongs to uid {} and tdctl runs as uid {} "
                               "without CAP_SYS_PTRACE; run tdctl as that user or as root",
                               pid, status->name, status->uid_real, self->uid_effective);
        if (auto scope = procfs::read_file("/proc/sys/kernel/yama/ptrace_scope")) {
            int value = std::atoi(scope->c_str());
            if (value > 0 && !has_cap)
                return fmt::format("cannot attach to process {} ({}): kernel.yama.ptrace_scope is {}, which only "
                                   "lets a process trace its descendants; run tdctl as root, give it CAP_SYS_PTRACE, "
                                   "or set the sysctl to 0",
                                   pid, status->name, value);
            if (value == 3)
                return fmt::format("cannot attach to process {} ({}): kernel.yama.ptrace_scope is 3, which forbids "
                                   "all tracing until reboot",
                                   pid, status->name);
        }
        if (!has_cap)
            return fmt::format("cannot attach to process {} ({}): permission denied; tdctl lacks CAP_SYS_PTRACE "
                               "(the target may be setuid or non-dumpable)",
                               pid, status->name);
        return fmt::format("cannot attach to process {} ({}): permission denied (a security module such as "
                           "SELinux/AppArmor, or a seccomp filter, forbids it)",
                           pid, status->name);
    }
    return fmt::format("cannot attach to process {} ({}): {}", pid, status->name, std::strerror(err));
}

}  // namespace tdctl::ptrace
