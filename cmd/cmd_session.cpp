// `attach PID` and `run PROG [ARGS]`: a new session once the last target is
// detached or gone, so the prompt goes on after a `detach` or an exit.
#include <fmt/format.h>

#include "base/error.hpp"
#include "cmd/records.hpp"
#include "cmd/runner.hpp"

namespace tdctl::cmd {

bool runner::may_start_session(const std::string& where)
{
    poll_target();
    if (!has_target())
        return true;
    out_.error("usage", fmt::format("{}: already {} process {}; `detach` (or `kill`) first", where,
                                    launched_ ? "running" : "attached to", session_->target().pid()));
    return false;
}

void runner::start_session(std::unique_ptr<core::session> next, bool launched)
{
    session_ = std::move(next);
    launched_ = launched;
    exit_status_.reset();
    detached_ = false;
    out_.set_pid(session_->target().pid());
    out_.print(start_record_of(*session_, launched));
}

command_status runner::cmd_attach(const words& w, const std::string& where)
{
    if (w.size() != 2)
        return usage_error(where, "usage: attach PID");
    auto pid = parse_tid(w[1]);
    if (!pid)
        return usage_error(where, fmt::format("'{}' is not a process ID", w[1]));
    if (!may_start_session(where))
        return command_status::failed;
    // The last session goes first: its change journal holds the block the
    // guardian watches, which the next one claims.
    session_.reset();
    try {
        start_session(core::session::attach(*pid, signals_.fd()), false);
    } catch (const error& e) {
        out_.error(e.domain() == error_domain::os ? "attach" : "target", fmt::format("{}: {}", where, e.what()));
        return command_status::failed;
    }
    return command_status::ok;
}

command_status runner::cmd_run(const words& w, const std::string& where)
{
    if (w.size() < 2)
        return usage_error(where, "usage: run PROG [ARGS...]");
    if (!may_start_session(where))
        return command_status::failed;
    ptrace::launch_options launch;
    launch.argv.assign(w.begin() + 1, w.end());
    session_.reset();
    try {
        // Held at its entry point, as a launch with -i: `continue`, `watch`
        // or `sleep` runs it.
        start_session(core::session::launch(launch), true);
    } catch (const error& e) {
        out_.error(e.domain() == error_domain::os ? "launch" : "target", fmt::format("{}: {}", where, e.what()));
        return command_status::failed;
    }
    return command_status::ok;
}

}  // namespace tdctl::cmd
