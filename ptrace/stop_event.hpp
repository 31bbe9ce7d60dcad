// What traced_process::next_event() gives its owner: a stop it must handle,
// the task(s) left stopped until traced_process::resume().
#pragma once

#include <cstdint>

#include "base/types.hpp"

namespace tdctl::ptrace {

enum class stop_kind {
    breakpoint,       ///< tid trapped on the site at `address`; resume(tid) does the step-over
    thread_created,   ///< tid (parent, at its clone event) made `child` (at its first stop); both stopped
    thread_exiting,   ///< tid is at PTRACE_EVENT_EXIT, still readable; stopped
    thread_exited,    ///< tid is gone (reaped); nothing to resume
    exec,             ///< tid (now the leader) runs a new image; every other task and every site is gone; stopped.
                      ///< `child` is the TID the exec'ing thread had and `address` its old thread pointer
    process_exited,   ///< every task is gone; `status` is the leader's raw wait status
    call_returned,    ///< tid faulted at the call marker (set_call_marker): a remote call it ran is over; stopped
};

const char* stop_kind_name(stop_kind k);

struct stop_event {
    stop_kind kind;
    tid_t tid;
    tid_t child;            ///< thread_created: the new LWP
    target_addr address;    ///< breakpoint: the site
    int status = 0;         ///< process_exited / thread_exited: raw wait status
    std::uint64_t arg0 = 0; ///< breakpoint: the first argument register (rdi) at the trap
};

}  // namespace tdctl::ptrace
