// Executes tdctl's commands against the session it owns: the same words in
// the REPL, in -e/-x scripts and on stdin. Each line is split into words,
// its command found in the table (commands.hpp) and its handler called with
// the runner's parts: the session slot, the run loop (run_loop.hpp), the
// argument checks (command_checks.hpp) and the event summary. Between
// commands the runner decides whether a stop of every thread is handed on
// to the next command or let go.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cmd/command_checks.hpp"
#include "cmd/output.hpp"
#include "cmd/run_loop.hpp"
#include "cmd/session_slot.hpp"
#include "cmd/signal_source.hpp"
#include "core/session/session.hpp"
#include "events/event_summary.hpp"

namespace tdctl::cmd {

struct command_context;
struct command_entry;
class trace_output;

class runner {
public:
    /// `launched`: the session's target was launched by tdctl (not attached to).
    runner(std::unique_ptr<core::session> session, output& out, signal_source& signals, bool launched);
    ~runner();
    runner(const runner&) = delete;
    runner& operator=(const runner&) = delete;

    /// The session of the current target, or of the last one (detached or
    /// exited) until `attach` or `run` starts another. Only while has_session().
    core::session& session() { return target_.session(); }
    /// False only after an `attach` or `run` that failed: the last session
    /// was let go first (its change journal is the one the guardian watches).
    bool has_session() const { return target_.has_session(); }
    /// The current session's target was launched by tdctl.
    bool launched() const { return target_.launched(); }
    /// A target to act on: alive, not exited, not detached.
    bool has_target() const { return target_.has_target(); }
    /// Raw wait status once the target has exited.
    std::optional<int> target_exit_status() const { return target_.exit_status(); }

    /// What lets the target run between and during commands, and the
    /// signals it took.
    run_loop& loop() { return loop_; }

    /// `--trace`: told of the session's LWPs when a `watch` starts (threads
    /// born or gone while nothing watched). Borrowed; nullptr for none.
    void set_trace(trace_output* trace) { trace_ = trace; }

    /// Executes one line; `where` names it in error messages ("-e 2",
    /// "script.tdctl:4", "stdin:3"). Blank lines and comments are ok.
    command_status execute(const std::string& line, const std::string& where);
    /// The default of a launch with no commands: `watch` until the target exits.
    command_status watch_until_exit();

    /// The session detaches right after the command about to run (the last
    /// of a batch that ends the session): a `watch` then leaves putting back
    /// what it armed to the detach, which does it in the same stop of every
    /// thread, instead of stopping them all once more before it.
    void set_detach_follows(bool follows) { detach_follows_ = follows; }
    /// Another command follows the one about to run at once (a batch's next
    /// line): a command that only looks at or edits the stopped target then
    /// leaves its threads stopped for it (core::session::end_command_hold).
    /// Holds for one execute() only.
    void set_command_follows(bool follows) { command_follows_ = follows; }

private:
    /// The parts a handler works with, for one command.
    command_context context();
    /// Before a command runs: a stop of every thread that lingers is let go
    /// unless the command works on the stopped target; such a command's own
    /// hold may linger when another command (or the detach) follows at once.
    void share_stop_round(const command_entry& command, bool follows);

    output& out_;
    session_slot target_;
    command_checks checks_;
    // Every printed message, counted (output's observer for this runner's life).
    events::event_summary summary_;
    trace_output* trace_ = nullptr;
    bool detach_follows_ = false;
    bool command_follows_ = false;
    // Declared last: its thread flushes out_ and is joined first.
    run_loop loop_;
};

}  // namespace tdctl::cmd
