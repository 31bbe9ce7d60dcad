// The tasks traced_process holds, by TID: one record each (ptrace/task.hpp),
// and what can be asked of or done to a record alone, without a system call.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "base/types.hpp"
#include "ptrace/registers_x86_64.hpp"
#include "ptrace/task.hpp"

namespace tdctl::ptrace {

class task_table {
public:
    using map_type = std::map<tid_t, std::unique_ptr<task>>;

    /// A record for a task that is ours from now on, in `state`; replaces
    /// any record of the same TID.
    task& add(tid_t tid, task_state state = task_state::running);
    task* find(tid_t tid);
    const task* find(tid_t tid) const;
    bool contains(tid_t tid) const { return tasks_.contains(tid); }
    void forget(tid_t tid) { tasks_.erase(tid); }
    void clear() { tasks_.clear(); }
    std::size_t size() const { return tasks_.size(); }
    /// Every TID, ascending.
    std::vector<tid_t> tids() const;
    map_type::iterator begin() { return tasks_.begin(); }
    map_type::iterator end() { return tasks_.end(); }
    map_type::const_iterator begin() const { return tasks_.begin(); }
    map_type::const_iterator end() const { return tasks_.end(); }

    /// After an exec: the exec'ing thread `former` takes the leader's TID and
    /// is the only record left (a new one when there was none).
    task& keep_only_leader(tid_t former, tid_t leader);

    /// The registers a task had when it trapped on a site, while its stop
    /// there is being handled; std::nullopt otherwise.
    std::optional<registers> trap_registers(tid_t tid) const;
    /// Takes the signal a stopped task holds for its restart (0 if none).
    int take_pending_signal(tid_t tid);
    /// Gives back a signal take_pending_signal() took (0: nothing).
    void restore_pending_signal(tid_t tid, int sig);
    /// Keeps a stopped task stopped across a release until the owner
    /// resumes it (as if it had a stop the owner has not handled).
    void keep_stopped(tid_t tid);
    /// The task cannot run code for us: not in a ptrace-stop of its own
    /// (group-stop, exiting, vfork()), or on a hit not yet stepped over.
    bool is_unfit_for_call(tid_t tid) const;

private:
    map_type tasks_;
};

}  // namespace tdctl::ptrace
