// What the parts of traced_process (the step-over, stop-all) ask of the
// process that holds them: to handle a status they took outside the wait
// loop, and to hold or release every task.
#pragma once

#include "base/types.hpp"
#include "ptrace/wait_status.hpp"

namespace tdctl::ptrace {

class stop_router {
public:
    /// A status of tid taken outside the wait loop (by TID): handled as the
    /// wait loop would, and any stop the owner must see queued for
    /// traced_process::next_event(), its tasks left to the owner.
    virtual void route(tid_t tid, wait_status ws) = 0;
    /// traced_process::stop_all(): every task stopped; nests.
    virtual void stop_all() = 0;
    /// traced_process::release_all(): undoes one stop_all().
    virtual void release_all() = 0;
    virtual bool is_holding() const = 0;

protected:
    ~stop_router() = default;
};

}  // namespace tdctl::ptrace
