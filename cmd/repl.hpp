// The interactive command line: libedit line editing and history, while the
// target keeps running and what it reports prints above the prompt.
#pragma once

#include "cmd/output.hpp"
#include "cmd/runner.hpp"
#include "cmd/signal_source.hpp"
#include "core/session.hpp"

namespace tdctl::cmd {

/// Runs until `quit`, end of input, SIGTERM/SIGHUP, or a failed attach.
/// Returns the status of the last command.
command_status run_repl(runner& run, core::session& session, output& out, signal_source& signals);

}  // namespace tdctl::cmd
