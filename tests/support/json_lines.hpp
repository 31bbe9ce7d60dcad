// Splitting tdctl's --json output (JSON Lines) for tests.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tdctl::test {

/// One JSON value per non-empty line of text. A line that is not JSON throws
/// std::runtime_error showing its number, the line and the parse error.
std::vector<nlohmann::json> json_lines(std::string_view text);

}  // namespace tdctl::test
