// traced_process's record of one task: its run state (ptrace/task_state.hpp),
// moved only by the note_* transitions, and the few facts that are not part
// of it. The layers above see it as a task_info.
#pragma once

#include <cstdint>
#include <optional>

#include "base/types.hpp"
#include "ptrace/registers_x86_64.hpp"
#include "ptrace/task_info.hpp"
#include "ptrace/task_state.hpp"
#include "ptrace/wait_status.hpp"

namespace tdctl::ptrace {

/// A hit being handled: the task stopped on a site of ours and its
/// step-over is due on its restart.
struct trap_hit {
    target_addr site;
    bool by_signal = false;  ///< stopped by the report signal in the agent's stub (a signal-stop site)
    registers regs;          ///< as at the trap, pc one past the site
};

class task : public task_info {
public:
    task(tid_t tid, task_state state) : task_info(tid, state) {}

    // ---- transitions (task_state.hpp)
    /// A status of this task from the wait (after_status). Returns whether
    /// it answered a PTRACE_INTERRUPT of ours (answers_interrupt).
    bool note_status(const wait_status& ws)
    {
        bool answered = answers_interrupt(state_, ws);
        state_ = after_status(state_, ws);
        return answered;
    }
    /// Out of its stop: restarted, or woken by SIGKILL (after_resume).
    void note_resumed() { state_ = after_resume(state_); }
    void note_interrupt_sent() { state_ = after_interrupt(state_); }
    void note_vfork_blocked() { state_ = after_vfork_found(state_); }
    void note_trap_of_ours() { state_ = after_trap_of_ours(state_); }
    /// Gone, or no child of ours any more: no stop is to come.
    void note_gone() { state_ = task_state::exiting; }

    // ---- what the view shows
    /// The exec'ing thread's record takes the leader's TID.
    void set_tid(tid_t tid) { tid_ = tid; }
    void set_thread_pointer(target_addr tp) { thread_pointer_ = tp; }
    void set_newest_clone_child(tid_t child) { newest_clone_child_ = child; }
    void set_returned_from_site(target_addr site) { returned_from_site_ = site; }
    /// Keeps a signal the task stopped for, to deliver on its restart.
    void keep_signal(int sig)
    {
        pending_signal = sig;
        ++signals_received_;
    }
    /// The registers at its trap on the hit's site, or as they are now.
    registers regs_at_trap() const { return hit ? hit->regs : registers::read(tid_).value_or(registers{}); }

    // ---- facts beside the run state

    /// Who restarts it: true while the owner has a stop of it to handle (a
    /// reported event, a remote call's thread), so hold and release leave it
    /// stopped; false when tdctl restarts it as it sees fit.
    bool needs_owner = false;
    /// The kernel keeps it in a group-stop (SIGSTOP & co.): it is restarted
    /// with PTRACE_LISTEN, under which it stays group-stopped although it
    /// is running for the wait, until SIGCONT or a restart with CONT.
    bool in_group_stop = false;
    /// The signal it stopped for, delivered on its restart (0: none).
    int pending_signal = 0;
    /// A trap byte's SIGTRAP is still queued for it: the hit was reported
    /// through our interrupt first, and that SIGTRAP is swallowed when it
    /// comes, whatever the run state is by then.
    bool sigtrap_owed = false;
    /// The hit being handled, from its trap until its step-over is done.
    std::optional<trap_hit> hit;
    /// Its signal mask before sigtrap_guard unblocked SIGTRAP in it (at its
    /// clone event), put back at its next trap of ours or at detach.
    std::optional<std::uint64_t> mask_before_trap;
};

}  // namespace tdctl::ptrace
