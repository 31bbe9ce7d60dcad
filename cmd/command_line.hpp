// Splitting and reading the words of one command line, the same for the
// REPL, -e, -x scripts and stdin. Parsers here are unit-tested.
#pragma once

#include <expected>
#include <optional>
#include <sys/types.h>
#include <string>
#include <string_view>
#include <vector>

namespace tdctl::cmd {

/// Splits a line into words: blanks separate, "double" and 'single' quotes
/// group, backslash escapes the next character outside single quotes, and an
/// unquoted # starts a comment. An unterminated quote is an error.
std::expected<std::vector<std::string>, std::string> split_words(std::string_view line);

/// Seconds from "2", "1.5", "500ms", "2s", "3m" (> 0 and finite).
std::optional<double> parse_duration(std::string_view text);

/// A non-negative decimal integer that fits in long long.
std::optional<long long> parse_count(std::string_view text);

/// A thread ID typed by a user (a TID from `threads`): 1 to 0x7fffffff.
std::optional<pid_t> parse_tid(std::string_view text);

/// The options the commands that let the target run share (`watch`, `stop`,
/// `stats watch`, `rusage collect`), as bits of run_option_grammar::options.
enum run_option : unsigned {
    option_for = 1,        ///< --for SECONDS
    option_interval = 2,   ///< --interval SECONDS
    option_count = 4,      ///< --count N (N >= 1)
    option_sort = 8,       ///< --sort COLUMN (any word; the command checks it)
    option_limit = 16,     ///< --limit N (N >= 1)
    option_bt = 32,        ///< --bt or --bt=DEPTH (DEPTH >= 1; one word)
    option_top = 64,       ///< --top N (N >= 1)
    option_stream = 128,   ///< --stream (no value)
    option_drop = 256,     ///< --drop (no value)
    option_stop = 512,     ///< --stop (no value)
};

/// Frames per event of a bare `--bt` (as many as `bt` shows).
inline constexpr long long default_bt_depth = 64;

/// Which options a command takes, and how it names them in its messages.
struct run_option_grammar {
    unsigned options = 0;   ///< run_option bits
    /// The one word that is not an option (EVENTS, TID|all): none, any word
    /// that does not start with "--", or any word at all (`stop`, whose
    /// EVENTS are checked by the event parser).
    enum class operand_kind { none, plain, any } operand = operand_kind::none;
    /// Appended to "bad duration 'X'" for --for ("" or " (e.g. 5, 2.5s, 500ms)").
    std::string_view duration_example;
    /// The message for a word out of place ("usage: watch [EVENTS] ...").
    std::string_view usage;
};

/// What parse_run_options() read; unset where the option was not given.
struct run_options {
    std::optional<double> for_seconds;  ///< --for, seconds
    std::optional<double> interval;     ///< --interval, seconds
    std::optional<long long> count;     ///< --count, >= 1
    std::optional<std::string> sort;    ///< --sort
    std::optional<long long> limit;     ///< --limit, >= 1
    std::optional<long long> bt;        ///< --bt[=DEPTH]: frames per event, >= 1
    std::optional<long long> top;       ///< --top, >= 1
    bool stream = false;                ///< --stream
    bool drop = false;                  ///< --drop
    bool stop = false;                  ///< --stop
    std::string operand;                ///< empty when none was given
};

/// Reads words[first...] by `grammar`. An option followed by no value is a
/// word out of place. Errors: the message for the user ("bad count 'x'",
/// "bad interval '0'", "bad limit '0'", "bad top '0'", "bad bt depth '0'", or grammar.usage).
std::expected<run_options, std::string> parse_run_options(const std::vector<std::string>& words, std::size_t first,
                                                          const run_option_grammar& grammar);

}  // namespace tdctl::cmd
