// `deadlock`: the target held, its mutex waits and the cycles of its
// wait-for graph (core/locks/deadlock_scan.hpp). Needs no agent.
#include "cmd/commands.hpp"
#include "cmd/records.hpp"
#include "cmd/target_hold.hpp"

namespace tdctl::cmd {

namespace {

// At most this many frames of each deadlocked thread's stack.
constexpr int deadlock_stack_depth = 32;

}  // namespace

command_status cmd_deadlock(command_context& c, const words& w, const std::string& where)
{
    if (w.size() > 1)
        return c.check.usage_error(where, "usage: deadlock");
    if (!c.check.require_target(where))
        return command_status::failed;
    deadlock_record rec;
    rec.pid = c.session().target().pid();
    {
        // Registers and stacks are read from stopped threads only.
        target_hold hold(c.session(), c.out);
        rec.scan = core::scan_for_deadlocks(c.session().target(), c.session().stacks(), deadlock_stack_depth);
    }
    c.out.print(rec);
    return rec.scan.cycles.empty() ? command_status::nothing : command_status::ok;
}

}  // namespace tdctl::cmd
