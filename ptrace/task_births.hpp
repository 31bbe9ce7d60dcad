// New tasks met in the wait: the child of a clone, fork or vfork event at
// its first stop, and a task whose first stop came before its parent's
// event. A new thread becomes the owner's; a new process (fork, vfork, a
// clone without CLONE_THREAD) is let go at once, its copy of our patched
// text given the original bytes back first.
#pragma once

#include <optional>
#include <unordered_map>

#include "ptrace/site_table.hpp"
#include "ptrace/task.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::ptrace {

/// A new thread at its first stop: its TID and that stop's status (an
/// event-stop, or its exit stop when a SIGKILL came first).
struct new_thread_stop {
    tid_t tid;
    wait_status first_stop;
};

class task_births {
public:
    /// For the traced process `pid`; `sites` gives a forked copy its bytes.
    task_births(pid_t pid, waiter& wait, site_table& sites);

    /// A status of a task with no record: a new clone whose first stop beat
    /// its parent's event (kept until the event comes), or one gone.
    void on_unknown_task(tid_t tid, wait_status ws);
    /// The whole process was sent SIGKILL: a parent's fork or clone event
    /// that has not come never will. A new process met early is let go now
    /// (its copy of our bytes put back), and any met from here on
    /// (on_unknown_task()), where its parent's event used to let it go.
    void note_group_killed();
    /// Whether tid was met that way and its parent's event is still to come.
    bool is_met_early(tid_t tid) const { return early_stops_.contains(tid); }

    /// At `parent`'s clone event stop: the new thread, now at its first stop
    /// (PTRACE_GETEVENTMSG, then its stop by TID; `peek`: read with
    /// peek_stop() first). std::nullopt when the event was lost to a SIGKILL
    /// (parent then marked running), the child vanished, or it is a new
    /// process (let go here). The caller records the thread where that stop
    /// says it is.
    std::optional<new_thread_stop> new_thread(task& parent, bool peek);
    /// At `parent`'s fork or vfork event stop: lets the new process go (a
    /// vfork child shares the parent's memory: its bytes stay).
    void let_go_forked(task& parent, bool is_vfork, bool peek);

private:
    /// The new task's TID from the parent's event; std::nullopt when a
    /// SIGKILL took the parent out of that stop.
    std::optional<tid_t> read_new_tid(task& parent);
    std::optional<wait_status> wait_first_stop(tid_t child, bool peek);
    /// Detaches a new process; one with its own copy of our memory gets
    /// the original bytes back first.
    void let_go_new_process(tid_t child, bool has_own_memory);
    /// Lets go of every early-stopped task that is not a thread of the
    /// target (/proc/TID/status Tgid). Only once a parent's event was lost:
    /// it costs a file read per early stop.
    void let_go_orphan_processes();

    pid_t pid_;
    waiter& waiter_;
    site_table& sites_;
    std::unordered_map<tid_t, wait_status> early_stops_;
    // A clone/fork event was lost to a SIGKILL of its parent: new tasks met
    // early may be processes nobody will claim.
    bool parent_events_lost_ = false;
};

}  // namespace tdctl::ptrace
