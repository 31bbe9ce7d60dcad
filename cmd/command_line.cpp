#include "cmd/command_line.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "base/quoting.hpp"

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

std::optional<pid_t> parse_tid(std::string_view text)
{
    auto v = parse_count(text);
    if (!v || *v == 0 || *v > 0x7fffffff)
        return std::nullopt;
    return static_cast<pid_t>(*v);
}

namespace {

// One option and its value (words[i] and words[i + 1]) into `into`; false
// with a message when the value is bad.
std::optional<std::string> read_option(const std::string& name, const std::string& value,
                                       const run_option_grammar& grammar, run_options& into)
{
    if (name == "--for") {
        into.for_seconds = parse_duration(value);
        if (!into.for_seconds)
            return "bad duration " + quoted_word(value) + std::string(grammar.duration_example);
    } else if (name == "--interval") {
        into.interval = parse_duration(value);
        if (!into.interval)
            return "bad interval " + quoted_word(value);
    } else if (name == "--sort") {
        into.sort = value;
    } else {
        auto& n = name == "--limit" ? into.limit : name == "--top" ? into.top : into.count;
        n = parse_count(value);
        if (!n || *n == 0)
            return "bad " + name.substr(2) + " " + quoted_word(value);
    }
    return std::nullopt;
}

bool takes_option(const std::string& word, const run_option_grammar& grammar)
{
    static constexpr std::pair<std::string_view, unsigned> names[] = {
        {"--for", option_for},   {"--interval", option_interval}, {"--count", option_count},
        {"--sort", option_sort}, {"--limit", option_limit}, {"--top", option_top}};
    for (const auto& [name, bit] : names)
        if (word == name)
            return (grammar.options & bit) != 0;
    return false;
}

// `--bt` or `--bt=DEPTH`, when the grammar takes it: true when `word` is
// one (`into.bt` set, or `bad` holding the message).
bool read_bt_option(const std::string& word, const run_option_grammar& grammar, run_options& into,
                    std::optional<std::string>& bad)
{
    if ((grammar.options & option_bt) == 0 || (word != "--bt" && !word.starts_with("--bt=")))
        return false;
    if (word == "--bt") {
        into.bt = default_bt_depth;
        return true;
    }
    std::string value = word.substr(5);
    into.bt = parse_count(value);
    if (!into.bt || *into.bt == 0)
        bad = "bad bt depth " + quoted_word(value);
    return true;
}

bool fits_operand(const std::string& word, const run_options& so_far, const run_option_grammar& grammar)
{
    using kind = run_option_grammar::operand_kind;
    if (grammar.operand == kind::none || !so_far.operand.empty())
        return false;
    return grammar.operand == kind::any || !word.starts_with("--");
}

}  // namespace

std::expected<run_options, std::string> parse_run_options(const std::vector<std::string>& words, std::size_t first,
                                                          const run_option_grammar& grammar)
{
    run_options got;
    for (std::size_t i = first; i < words.size(); ++i) {
        std::optional<std::string> bad_bt;
        if (words[i] == "--stream" && (grammar.options & option_stream) != 0) {
            got.stream = true;
        } else if (words[i] == "--drop" && (grammar.options & option_drop) != 0) {
            got.drop = true;
        } else if (words[i] == "--stop" && (grammar.options & option_stop) != 0) {
            got.stop = true;
        } else if (read_bt_option(words[i], grammar, got, bad_bt)) {
            if (bad_bt)
                return std::unexpected(*bad_bt);
        } else if (takes_option(words[i], grammar) && i + 1 < words.size()) {
            if (auto bad = read_option(words[i], words[i + 1], grammar, got))
                return std::unexpected(*bad);
            ++i;
        } else if (fits_operand(words[i], got, grammar)) {
            got.operand = words[i];
        } else {
            return std::unexpected(std::string(grammar.usage));
        }
    }
    return got;
}

}  // namespace tdctl::cmd
