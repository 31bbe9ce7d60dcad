// `attach PID` and `run PROG [ARGS]`: a new session once the last target is
// detached or gone, so the prompt goes on after a `detach` or an exit.
#include <fmt/format.h>

#include <unistd.h>

#include "base/error.hpp"
#include "base/quoting.hpp"
#include "cmd/commands.hpp"
#include "cmd/records.hpp"

namespace tdctl::cmd {

namespace {

// No target to act on, so `attach` or `run` may start one; false after the
// error that names the current target.
bool may_start_session(command_context& c, const std::string& where)
{
    c.loop.poll_target();
    if (!c.target.has_target())
        return true;
    c.out.error("usage", fmt::format("{}: already {} process {}; `detach` (or `kill`) first", where,
                                     c.target.launched() ? "running" : "attached to", c.session().target().pid()));
    return false;
}

// Makes `next` the session commands act on (after `attach` or `run`).
void start_session(command_context& c, std::unique_ptr<core::session> next, bool launched)
{
    c.target.start(std::move(next), launched);
    c.out.set_pid(c.session().target().pid());
    c.out.print(start_record_of(c.session(), launched));
}

}  // namespace

command_status cmd_attach(command_context& c, const words& w, const std::string& where)
{
    if (w.size() != 2)
        return c.check.usage_error(where, "usage: attach PID");
    auto pid = parse_tid(w[1]);
    if (!pid)
        return c.check.usage_error(where, fmt::format("{} is not a process ID", quoted_word(w[1])));
    if (!may_start_session(c, where))
        return command_status::failed;
    // The last session goes first: its change journal holds the block the
    // guardian watches, which the next one claims.
    c.target.release();
    try {
        start_session(c, core::session::attach(*pid, c.loop.signal_fd()), false);
    } catch (const error& e) {
        c.out.error(e.domain() == error_domain::os ? "attach" : "target", fmt::format("{}: {}", where, e.what()));
        return command_status::failed;
    }
    return command_status::ok;
}

command_status cmd_run(command_context& c, const words& w, const std::string& where)
{
    if (w.size() < 2)
        return c.check.usage_error(where, "usage: run PROG [ARGS...]");
    if (!may_start_session(c, where))
        return command_status::failed;
    ptrace::launch_options launch;
    launch.argv.assign(w.begin() + 1, w.end());
    // Typed at a terminal: its Ctrl-C ends tdctl's command, not the program.
    launch.prompt_takes_interrupts = ::isatty(STDIN_FILENO) != 0;
    c.target.release();
    try {
        // Held at its entry point, as a launch with -i: `continue`, `watch`
        // or `sleep` runs it.
        start_session(c, core::session::launch(launch), true);
    } catch (const error& e) {
        // A failed exec names the program as typed.
        c.out.error(e.domain() == error_domain::os ? "launch" : "target",
                    fmt::format("{}: {}", where, long_words_cut(e.what())));
        return command_status::failed;
    }
    return command_status::ok;
}

}  // namespace tdctl::cmd
