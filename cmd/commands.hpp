// The command table: every command of tdctl's command language (the REPL,
// -e/-x scripts, stdin), the words that name it, its handler and its help
// text. `ls` of the handlers: cmd_*.cpp, one file per group of commands,
// each handler a function of the command_context it is given.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cmd/command_checks.hpp"
#include "cmd/output.hpp"
#include "cmd/run_loop.hpp"
#include "cmd/session_slot.hpp"
#include "events/event_summary.hpp"

namespace tdctl::cmd {

class trace_output;

/// What a command handler works with, all borrowed from the runner for the
/// length of one command.
struct command_context {
    session_slot& target;             ///< the session commands act on
    output& out;
    run_loop& loop;                   ///< lets the target run
    command_checks& check;            ///< argument checks and error records
    events::event_summary& summary;   ///< every event message printed in the runner's life
    trace_output* trace;              ///< `--trace`, told of the LWPs when a run starts; nullptr for none
    /// The session detaches right after this command (the last of a batch
    /// that ends the session): a command that armed leaves the disarm to the
    /// detach, which does it in the same stop of every thread.
    bool detach_follows;

    core::session& session() { return target.session(); }
};

/// A command's handler: every word of the line, the command's name first;
/// `where` names the line in messages ("-e 2", "script.tdctl:4", "stdin:3").
using handler = command_status (*)(command_context& c, const words& w, const std::string& where);

/// How a command treats a stop of every thread that lingers from the
/// command before (core::session::release_lingering).
enum class stop_use {
    /// It works on the stopped target (or arms it first): it takes the stop
    /// over and, when another command follows at once, hands its own on.
    shares,
    /// It lets the target run or only reads /proc: the stop goes first.
    releases,
};

/// One command: runner::execute() finds it by its name or an alias.
struct command_entry {
    std::string_view name;                   ///< the name `help` lists and `help NAME` finds
    std::vector<std::string_view> aliases;   ///< other words for it ("c", "cont")
    handler run;
    stop_use stops;
    std::string_view help;                   ///< `help NAME`: usage lines, then what it does
};

/// One word after a command that picks what it does (`event set`, `stats show`).
struct subcommand_entry {
    std::string_view name;
    handler run;   ///< called with every word of the line, the command's name first
};

/// The handler `table` has for `word`, or nullptr.
handler find_subcommand(std::span<const subcommand_entry> table, std::string_view word);

/// Every command, in the order the unknown-command message lists them.
std::span<const command_entry> command_table();

/// The command `word` names (its name or an alias), or nullptr.
const command_entry* find_command(std::string_view word);

/// Help text: the command list, or one command's usage ("" for no such command).
std::string help_text(const std::string& command);

// The handlers, one group a file.
// cmd_threads.cpp
command_status cmd_threads(command_context& c, const words& w, const std::string& where);
// cmd_event.cpp: addr, set, clear, enable, getmsg
command_status cmd_event(command_context& c, const words& w, const std::string& where);
// cmd_run.cpp: the commands that let the target run or end its session
command_status cmd_stop(command_context& c, const words& w, const std::string& where);
command_status cmd_watch(command_context& c, const words& w, const std::string& where);
command_status cmd_sleep(command_context& c, const words& w, const std::string& where);
command_status cmd_continue(command_context& c, const words& w, const std::string& where);
command_status cmd_interrupt(command_context& c, const words& w, const std::string& where);
command_status cmd_detach(command_context& c, const words& w, const std::string& where);
command_status cmd_kill(command_context& c, const words& w, const std::string& where);
command_status cmd_quit(command_context& c, const words& w, const std::string& where);
// cmd_session.cpp: a new session once the last target is gone
command_status cmd_attach(command_context& c, const words& w, const std::string& where);
command_status cmd_run(command_context& c, const words& w, const std::string& where);
// cmd_stats.cpp
command_status cmd_stats(command_context& c, const words& w, const std::string& where);
command_status cmd_rusage(command_context& c, const words& w, const std::string& where);
command_status cmd_lwpinfo(command_context& c, const words& w, const std::string& where);
// cmd_top.cpp, cmd_bt.cpp, cmd_deadlock.cpp, cmd_locks.cpp
command_status cmd_top(command_context& c, const words& w, const std::string& where);
command_status cmd_bt(command_context& c, const words& w, const std::string& where);
command_status cmd_deadlock(command_context& c, const words& w, const std::string& where);
command_status cmd_locks(command_context& c, const words& w, const std::string& where);
// cmd_summary.cpp
command_status cmd_summary(command_context& c, const words& w, const std::string& where);
/// The summary records of `counts` (`command`: "watch", "summary"), the
/// first `top` call sites; `watch` ends with them too.
void print_summary(command_context& c, const std::string& command, const events::summary_counts& counts,
                   std::size_t top);
// commands.cpp
command_status cmd_help(command_context& c, const words& w, const std::string& where);

}  // namespace tdctl::cmd
