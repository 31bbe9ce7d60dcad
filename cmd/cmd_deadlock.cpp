// `deadlock`: the target held, its mutex waits and the cycles of its
// wait-for graph (core/deadlock_scan.hpp). Needs no agent.
#include "cmd/records.hpp"
#include "cmd/runner.hpp"
#include "cmd/target_hold.hpp"

namespace tdctl::cmd {

command_status runner::cmd_deadlock(const words& w, const std::string& where)
{
    if (w.size() > 1)
        return usage_error(where, "usage: deadlock");
    if (!require_target(where))
        return command_status::failed;
    deadlock_record rec;
    rec.pid = session_->target().pid();
    {
        // Registers and stacks are read from stopped threads only.
        target_hold hold(*session_, out_);
        rec.scan = core::scan_for_deadlocks(session_->target(), session_->stacks(), deadlock_stack_depth);
    }
    out_.print(rec);
    return rec.scan.cycles.empty() ? command_status::nothing : command_status::ok;
}

}  // namespace tdctl::cmd
