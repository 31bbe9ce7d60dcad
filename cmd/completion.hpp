// Tab completion at the prompt: what fits the word under the cursor, from
// the command table, each command's subcommands and options, the event
// names, `top`'s columns and the target's TIDs. Pure functions of the line,
// unit-tested without a terminal.
#pragma once

#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace tdctl::cmd {

/// What Tab offers for the last word of a line.
struct completion {
    std::string partial;                   ///< what is typed of that word (after the last comma of an event list)
    std::vector<std::string> candidates;   ///< the words that start with it, sorted, each once
};

/// The candidates for the last word of `line` (the text before the cursor;
/// a blank at its end starts a new word). `tids`: the target's TIDs now
/// (none without a target).
completion complete_line(std::string_view line, const std::vector<pid_t>& tids);

/// The longest prefix every word shares ("" for none).
std::string common_prefix(const std::vector<std::string>& words);

}  // namespace tdctl::cmd
