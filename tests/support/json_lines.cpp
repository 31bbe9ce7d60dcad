#include "tests/support/json_lines.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace tdctl::test {

std::vector<nlohmann::json> json_lines(std::string_view text)
{
    std::vector<nlohmann::json> values;
    std::size_t line_number = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        ++line_number;
        if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos)
            continue;
        try {
            values.push_back(nlohmann::json::parse(line));
        } catch (const nlohmann::json::parse_error& e) {
            throw std::runtime_error(fmt::format("output line {} is not JSON: '{}' ({})", line_number, line, e.what()));
        }
    }
    return values;
}

}  // namespace tdctl::test
