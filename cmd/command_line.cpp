#include "cmd/command_line.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace tdctl::cmd {

std::expected<std::vector<std::string>, std::string> split_words(std::string_view line)
{
    std::vector<std::string> words;
    std::string cur;
    bool in_word = false;
    char quote = 0;
    for (std::size_t i = 0; i < line.size(); ++i) {
        char c = line[i];
        if (quote != 0) {
            if (c == quote) {
                quote = 0;
            } else if (c == '\\' && quote == '"' && i + 1 < line.size()) {
                cur += line[++i];
            } else {
                cur += c;
            }
            continue;
        }
        if (c == '#' && !in_word)
            break;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            if (in_word) {
                words.push_back(std::move(cur));
                cur.clear();
                in_word = false;
            }
            continue;
        }
        in_word = true;
        if (c == '"' || c == '\'') {
            quote = c;
        } else if (c == '\\' && i + 1 < line.size()) {
            cur += line[++i];
        } else {
            cur += c;
        }
    }
    if (quote != 0)
        return std::unexpected(std::string("unterminated ") + (quote == '"' ? "double" : "single") + " quote");
    if (in_word)
        words.push_back(std::move(cur));
    return words;
}

std::optional<double> parse_duration(std::string_view text)
{
    double scale = 1.0;
    if (text.ends_with("ms")) {
        scale = 0.001;
        text.remove_suffix(2);
    } else if (text.ends_with("s")) {
        text.remove_suffix(1);
    } else if (text.ends_with("m")) {
        scale = 60.0;
        text.remove_suffix(1);
    }
    if (text.empty())
        return std::nullopt;
    std::string s(text);
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0)
        return std::nullopt;
    return v * scale;
}

std::optional<long long> parse_count(std::string_view text)
{
    long long v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size() || v < 0)
        return std::nullopt;
    return v;
}

}  // namespace tdctl::cmd
