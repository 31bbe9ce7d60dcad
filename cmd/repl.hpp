// The interactive command line: libedit line editing and history, while the
// target keeps running and what it reports prints above the prompt.
#pragma once

#include "cmd/output.hpp"
#include "cmd/runner.hpp"
#include "cmd/signal_source.hpp"
#include "core/session/session.hpp"

namespace tdctl::cmd {

/// Runs the prompt on the terminal on stdin until `quit`, end of input
/// (Ctrl-D) or SIGTERM/SIGHUP (recorded in `run`: must_exit()). The end of
/// the target (`detach`, `kill`, its exit) does not end it: `attach PID` or
/// `run PROG` starts another session. Tab completes commands, subcommands,
/// event names, options and TIDs (completion.hpp). While tdctl is in the
/// background of its terminal it shows no prompt and reads nothing,
/// servicing the target until it is brought to the foreground. Returns the
/// status of the last command.
command_status run_repl(runner& run, output& out, signal_source& signals);

}  // namespace tdctl::cmd
