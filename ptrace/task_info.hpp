// What the controller knows about one LWP of the target, as the layers
// above read it (traced_process::find): a read-only view of the record
// traced_process keeps (ptrace/task.hpp).
#pragma once

#include <cstdint>

#include "base/types.hpp"
#include "ptrace/task_state.hpp"

namespace tdctl::ptrace {

class task_info {
public:
    tid_t tid() const { return tid_; }
    task_state state() const { return state_; }
    /// In a ptrace-stop now.
    bool is_stopped() const { return ptrace::is_stopped(state_); }
    /// At or past PTRACE_EVENT_EXIT.
    bool is_exiting() const { return ptrace::is_exiting(state_); }
    /// fs_base when last seen stopped; for glibc the struct pthread address.
    target_addr thread_pointer() const { return thread_pointer_; }
    /// The last thread this task created (from its clone event).
    tid_t newest_clone_child() const { return newest_clone_child_; }
    /// Signal-delivery-stops seen while attached.
    std::uint64_t signals_received() const { return signals_received_; }
    /// The site whose `ret` tdctl performed for this task while it was
    /// stopped (a hold, a finished step-over); null once the task runs again.
    /// It then stands just after that reporting function's return.
    target_addr returned_from_site() const { return returned_from_site_; }

protected:
    task_info(tid_t tid, task_state state) : tid_(tid), state_(state) {}

    tid_t tid_;
    task_state state_;
    target_addr thread_pointer_;
    tid_t newest_clone_child_;
    std::uint64_t signals_received_ = 0;
    target_addr returned_from_site_;
};

}  // namespace tdctl::ptrace
