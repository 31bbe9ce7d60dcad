#include "ptrace/task_births.hpp"

#include <cerrno>
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/process_memory.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

namespace {

// Whether task_id is a task of thread group pid now (tgkill with signal 0):
// how a clone event's child is told from a new process.
bool is_in_thread_group(pid_t pid, tid_t task_id)
{
    // Signal 0 checks existence only; ESRCH also when task_id is in another
    // thread group. EPERM comes after the group check: it is in this one.
    if (::syscall(SYS_tgkill, pid, task_id.value, 0) == 0)
        return true;
    return errno == EPERM;
}

// Whether task `other` uses the target's address space (kcmp(2) KCMP_VM);
// false when that cannot be told.
bool shares_memory_with_target(pid_t pid, tid_t other)
{
    return ::syscall(SYS_kcmp, pid, other.value, KCMP_VM, 0, 0) == 0;
}

}  // namespace

task_births::task_births(pid_t pid, waiter& wait, site_table& sites) : pid_(pid), waiter_(wait), sites_(sites) {}

std::optional<new_thread_stop> task_births::new_thread(task& parent, bool peek)
{
    auto new_tid = read_new_tid(parent);
    if (!new_tid)
        return std::nullopt;
    tid_t child = *new_tid;
    auto first = wait_first_stop(child, peek);
    if (!first || !first->is_stop()) {
        log::debug("clone child {} vanished before its first stop", child.value);
        return std::nullopt;
    }
    // A thread of this process, or a new process (a clone without
    // CLONE_THREAD whose exit signal is not SIGCHLD)? One system call, where
    // the parent's registers and its clone3 arguments took two.
    if (!is_in_thread_group(pid_, child)) {
        // Not ours to keep; a copy of our memory gets the original bytes back.
        let_go_new_process(child, !shares_memory_with_target(pid_, child));
        return std::nullopt;
    }
    return new_thread_stop{child, *first};
}

void task_births::let_go_forked(task& parent, bool is_vfork, bool peek)
{
    auto new_tid = read_new_tid(parent);
    if (!new_tid)
        return;
    tid_t child = *new_tid;
    if (auto first = wait_first_stop(child, peek); first && first->is_stop()) {
        // A vfork child shares our memory: its bytes are the parent's and must stay.
        let_go_new_process(child, !is_vfork);
        log::debug("{} child {} detached", is_vfork ? "vfork" : "fork", child.value);
    }
}

void task_births::on_unknown_task(tid_t tid, wait_status ws)
{
    if (ws.kind() == wait_kind::exit_event) {
        // A clone whose parent died (SIGKILL, the group's exit or an
        // exec) before reporting it: SIGKILL woke it from its first stop
        // and it is exiting. Nothing is owed to it, and the group's exit
        // (or the exec's de_thread) waits until it has gone.
        early_stops_.erase(tid);
        ptrace_call(PTRACE_CONT, tid, nullptr, nullptr);
    } else if (ws.is_stop()) {
        // A new clone whose first stop came before its parent's clone event.
        early_stops_.insert_or_assign(tid, ws);
        if (parent_events_lost_)
            let_go_orphan_processes();
    } else {
        early_stops_.erase(tid);  // it has gone
    }
}

void task_births::note_group_killed()
{
    parent_events_lost_ = true;
    let_go_orphan_processes();
}

std::optional<tid_t> task_births::read_new_tid(task& parent)
{
    unsigned long msg = 0;
    if (ptrace_call(PTRACE_GETEVENTMSG, parent.tid(), nullptr, &msg) == 0 && msg > 0)
        return tid_t{static_cast<pid_t>(msg)};
    // A SIGKILL (the group's exit, another thread's exec) took the parent out
    // of its event stop: it is no longer stopped and its next status is its
    // exit. The new task, if any, is met as a stranger (on_unknown_task);
    // waiting for "TID 0" would take any child's status.
    log::debug("task {}: its clone/fork event has gone (parent killed)", parent.tid().value);
    parent.note_resumed();
    parent_events_lost_ = true;
    let_go_orphan_processes();
    return std::nullopt;
}

std::optional<wait_status> task_births::wait_first_stop(tid_t child, bool peek)
{
    if (auto it = early_stops_.find(child); it != early_stops_.end()) {
        auto ws = it->second;
        early_stops_.erase(it);
        return ws;
    }
    // During detach's stop-all the child has usually reached its first stop
    // already: read it without a waitpid() (traced_process::begin_detach()).
    if (peek)
        if (auto peeked = peek_stop(child))
            return peeked;
    return waiter_.wait_for(child);
}

void task_births::let_go_orphan_processes()
{
    // A new process (fork, vfork, clone without CLONE_THREAD) is never ours
    // to keep; one whose parent's event is lost would stay stopped. Whether
    // its parent's event is still to come or not, it goes now (a later wait
    // for it finds no such child).
    for (auto it = early_stops_.begin(); it != early_stops_.end();) {
        auto st = procfs::read_status(it->first.value);
        if (st && st->tgid != pid_) {
            let_go_new_process(it->first, !shares_memory_with_target(pid_, it->first));
            it = early_stops_.erase(it);
        } else {
            ++it;
        }
    }
}

void task_births::let_go_new_process(tid_t child, bool has_own_memory)
{
    // Its own copy of our patched text gets the original bytes back first.
    if (has_own_memory) {
        try {
            process_memory child_mem(child.value);
            sites_.write_saved_bytes(child_mem);
        } catch (const error& e) {
            log::debug("cleaning child process {}: {}", child.value, e.what());
        }
    }
    ptrace_call(PTRACE_DETACH, child, nullptr, nullptr);
}

}  // namespace tdctl::ptrace
