// Splitting and reading the words of one command line, the same for the
// REPL, -e, -x scripts and stdin. Parsers here are unit-tested.
#pragma once

#include <expected>
#include <optional>
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

}  // namespace tdctl::cmd
