// `bt`: call stacks of the target's threads.
#include <fmt/format.h>

#include "cmd/commands.hpp"
#include "cmd/records.hpp"
#include "cmd/target_hold.hpp"

namespace tdctl::cmd {

namespace {

// The LWP is gone, or past its exit: the hold does not stop such a task
// again, and it has no stack to read.
bool is_ending(command_context& c, tid_t lwp)
{
    const auto* t = c.session().target().process().find(lwp);
    return t == nullptr || t->is_exiting();
}

}  // namespace

command_status cmd_bt(command_context& c, const words& w, const std::string& where)
{
    if (w.size() > 2)
        return c.check.usage_error(where, "usage: bt [TID|all]");
    if (!c.check.require_target(where))
        return command_status::failed;
    std::vector<tid_t> lwps;
    if (w.size() == 2 && w[1] != "all") {
        auto tid = c.check.parse_tid_word(w[1], where, "a thread ID (a TID from `threads`) or all");
        if (!tid)
            return command_status::failed;
        lwps.push_back(*tid);
    }
    // Unwinding reads registers: every LWP must be in a ptrace-stop.
    target_hold hold(c.session(), c.out);
    const bool all = lwps.empty();
    if (all)
        lwps = c.session().target().lwps();
    command_status status = command_status::ok;
    bt_skipped_record skipped;
    output::bulk batch(c.out);
    for (tid_t t : lwps) {
        // `bt all` lists every task the hold knows, those past their exit
        // (not stopped again, not reaped yet) included: such a thread has
        // no stack left. It is counted, and the batch goes on.
        if (all && is_ending(c, t)) {
            skipped.tids.push_back(t.value);
            continue;
        }
        if (c.session().target().process().find(t) == nullptr) {
            c.out.error("ESRCH", fmt::format("{}: bt {}: no thread {} in process {}", where, t.value, t.value,
                                             c.session().target().pid()));
            status = command_status::failed;
            continue;
        }
        std::string name = c.session().target().thread_name(t);
        auto frames = c.session().stacks().stack_of(t);
        if (!frames && all && is_ending(c, t)) {
            skipped.tids.push_back(t.value);
            continue;
        }
        if (!frames) {
            c.out.error("unwind", fmt::format("{}: bt {}: {}", where, t.value, frames.error()));
            status = command_status::failed;
            continue;
        }
        c.out.print(backtrace_record{t.value, std::move(name), std::move(*frames)});
    }
    if (!skipped.tids.empty())
        c.out.print(skipped);
    return status;
}

}  // namespace tdctl::cmd
