// `bt`: call stacks of the target's threads.
#include <fmt/format.h>

#include "cmd/records.hpp"
#include "cmd/runner.hpp"
#include "cmd/target_hold.hpp"

namespace tdctl::cmd {

command_status runner::cmd_bt(const words& w, const std::string& where)
{
    if (w.size() > 2)
        return usage_error(where, "usage: bt [TID|all]");
    if (!require_target(where))
        return command_status::failed;
    std::vector<tid_t> lwps;
    if (w.size() == 2 && w[1] != "all") {
        auto tid = parse_tid_word(w[1], where, "a thread ID (a TID from `threads`) or all");
        if (!tid)
            return command_status::failed;
        lwps.push_back(*tid);
    }
    // Unwinding reads registers: every LWP must be in a ptrace-stop.
    target_hold hold(*session_, out_);
    if (lwps.empty())
        lwps = session_->target().lwps();
    command_status status = command_status::ok;
    output::bulk batch(out_);
    for (tid_t t : lwps) {
        if (session_->target().process().find(t) == nullptr) {
            out_.error("ESRCH", fmt::format("{}: bt {}: no thread {} in process {}", where, t.value, t.value,
                                            session_->target().pid()));
            status = command_status::failed;
            continue;
        }
        std::string name = session_->target().thread_name(t);
        auto frames = session_->stacks().stack_of(t);
        if (!frames) {
            out_.error("unwind", fmt::format("{}: bt {}: {}", where, t.value, frames.error()));
            status = command_status::failed;
            continue;
        }
        out_.print(backtrace_record{t.value, std::move(name), std::move(*frames)});
    }
    return status;
}

}  // namespace tdctl::cmd
