// Batch commands: -e/-x lines, and commands piped on stdin, run in order with
// batch semantics, as gdb -batch runs its -ex commands: a command that fails
// prints its error record and the next one runs; the batch's exit status
// says a command failed (2) once every line has run. `quit`, a signal to
// tdctl and the target's exit or detach end the batch; the commands left
// are then named in a note. The same with or without a terminal: only the
// prompt that may follow differs.
#pragma once

#include <string>
#include <vector>

#include "cmd/output.hpp"
#include "cmd/runner.hpp"
#include "cmd/signal_source.hpp"
#include "core/session/session.hpp"

namespace tdctl::cmd {

/// One command line and where it came from ("-e 2", "script.tdctl:4", "stdin:3").
struct script_line {
    std::string text;
    std::string where;
};

/// Runs lines one at a time and keeps the batch's outcome.
class batch {
public:
    /// `prompt_follows`: an interactive prompt follows the -e/-x lines, so
    /// Ctrl-C ends only the running command (as at the prompt).
    batch(runner& run, output& out, bool prompt_follows);

    /// Runs the lines in order, a failed one included; false once the batch
    /// has ended (`quit`, a signal, or the target's exit or `detach` — then
    /// the commands not run are named in a note). `ends_session`: the session
    /// detaches after the last line (no prompt or stdin follows).
    bool run_lines(const std::vector<script_line>& lines, bool ends_session = false);

    /// Reads commands from stdin (a pipe, a file, or with --batch a
    /// terminal, read only while tdctl is in its foreground) and runs each as
    /// soon as its line is complete, servicing the target while it waits for
    /// input. Stops reading once the target has exited or is detached.
    /// False once the batch has ended, true at end of input.
    bool run_stdin(signal_source& signals);

    /// A command of the batch failed (exit status 2).
    bool failed() const { return failed_; }
    /// How the last command that ran ended: `nothing` (exit status 1) and
    /// `timed_out` (3) tell a script what an `ok` (0) would hide.
    command_status last_outcome() const { return last_outcome_; }
    /// The signal (SIGINT/SIGTERM/SIGHUP) that ended the batch, or 0.
    int end_signal() const { return end_signal_; }

private:
    /// Runs one line; false when the batch ends here.
    bool run_one(const script_line& line);
    /// Names the commands left unrun, and `why` they were not run: those up
    /// to a `quit` among them (it would have ended the batch there).
    void note_not_run(const std::vector<script_line>& rest, const std::string& why);
    /// Why the batch ended before the line after the one that just ran.
    std::string why_ended() const;

    runner& run_;
    output& out_;
    bool prompt_follows_;
    bool failed_ = false;
    bool quit_ = false;
    command_status last_outcome_ = command_status::ok;
    int end_signal_ = 0;
};

}  // namespace tdctl::cmd
