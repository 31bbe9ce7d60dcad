// The command table: every command of tdctl's command language (the REPL,
// -e/-x scripts, stdin), the words that name it and its help text. `ls` of
// the handlers: cmd_*.cpp, one file per group of commands.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cmd/runner.hpp"

namespace tdctl::cmd {

/// One command: runner::execute() finds it by its name or an alias.
struct command_entry {
    std::string_view name;                   ///< the name `help` lists and `help NAME` finds
    std::vector<std::string_view> aliases;   ///< other words for it ("c", "cont")
    runner::handler run;                     ///< runs it with every word of the line and where the line came from
    std::string_view help;                   ///< `help NAME`: usage lines, then what it does
};

/// One word after a command that picks what it does (`event set`, `stats show`).
struct subcommand_entry {
    std::string_view name;
    runner::handler run;   ///< called with every word of the line, the command's name first
};

/// The handler `table` has for `word`, or nullptr.
runner::handler find_subcommand(std::span<const subcommand_entry> table, std::string_view word);

/// Every command, in the order the unknown-command message lists them.
std::span<const command_entry> command_table();

/// The command `word` names (its name or an alias), or nullptr.
const command_entry* find_command(std::string_view word);

}  // namespace tdctl::cmd
