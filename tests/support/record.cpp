#include "tests/support/record.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "tests/support/proc.hpp"

namespace tdctl::test {

namespace {

struct kind_shape {
    std::string_view kind;
    std::size_t fields;  ///< exact count; "thread"'s label takes the rest of the line
};

constexpr std::array<kind_shape, 12> kinds{{
    {"start", 1},
    {"thread", 3},
    {"exit", 1},
    {"signal-sent", 2},
    {"signal-got", 2},
    {"fork", 1},
    {"child-exit", 2},
    {"caught-chld", 1},
    {"opened", 0},
    {"mutex", 1},
    {"done", 0},
    {"image", 1},
}};

[[noreturn]] void malformed(std::size_t line_number, std::string_view line, std::string_view why)
{
    throw std::runtime_error(fmt::format("record line {} {}: '{}'", line_number, why, line));
}

record_fact parse_line(std::string_view line, std::size_t line_number)
{
    record_fact fact;
    fact.line_number = line_number;
    fact.line = std::string(line);

    auto next_word = [&line]() {
        auto end = line.find(' ');
        std::string_view word = line.substr(0, end);
        line.remove_prefix(end == std::string_view::npos ? line.size() : end + 1);
        return word;
    };
    fact.kind = std::string(next_word());
    auto shape = std::find_if(kinds.begin(), kinds.end(), [&](const kind_shape& k) { return k.kind == fact.kind; });
    if (shape == kinds.end())
        malformed(line_number, fact.line, "has an unknown kind");
    for (std::size_t i = 0; i < shape->fields; ++i) {
        if (line.empty())
            malformed(line_number, fact.line, fmt::format("has fewer than {} fields", shape->fields));
        if (fact.kind == "thread" && i == 2) {
            fact.fields.emplace_back(line);  // the label: the rest of the line
            line = {};
        } else {
            fact.fields.emplace_back(next_word());
        }
    }
    if (!line.empty())
        malformed(line_number, fact.line, fmt::format("has more than {} fields", shape->fields));
    // Every field but the label is a number; check now so tests get a clear message.
    for (std::size_t i = 0; i < fact.fields.size(); ++i) {
        if (!(fact.kind == "thread" && i == 2))
            fact.number(i);
    }
    return fact;
}

}  // namespace

std::int64_t record_fact::number(std::size_t i) const
{
    if (i >= fields.size())
        throw std::runtime_error(fmt::format("record line {} has no field {}: '{}'", line_number, i + 1, line));
    std::string_view text = fields[i];
    int base = 10;
    if (text.starts_with("0x")) {
        text.remove_prefix(2);
        base = 16;
    }
    std::uint64_t value = 0;
    auto [p, err] = std::from_chars(text.data(), text.data() + text.size(), value, base);
    if (text.empty() || err != std::errc{} || p != text.data() + text.size())
        throw std::runtime_error(
            fmt::format("record line {} field {} is not a number: '{}'", line_number, i + 1, line));
    return static_cast<std::int64_t>(value);
}

const std::string& record_fact::label() const
{
    if (kind != "thread")
        throw std::runtime_error(fmt::format("record line {} is not a thread fact: '{}'", line_number, line));
    return fields[2];
}

std::vector<record_fact> parse_record(std::string_view text)
{
    std::vector<record_fact> facts;
    std::size_t line_number = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        if (nl == std::string_view::npos)
            break;  // a line still being written
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl + 1);
        ++line_number;
        if (line.empty())
            malformed(line_number, line, "is empty");
        facts.push_back(parse_line(line, line_number));
    }
    return facts;
}

std::vector<record_fact> read_record(const std::string& path)
{
    auto text = read_text_file(path);
    if (!text)
        throw std::runtime_error("cannot read record file " + path);
    return parse_record(*text);
}

std::size_t count_kind(const std::vector<record_fact>& facts, std::string_view kind)
{
    return static_cast<std::size_t>(
        std::count_if(facts.begin(), facts.end(), [&](const record_fact& f) { return f.kind == kind; }));
}

std::vector<record_fact> facts_of_kind(const std::vector<record_fact>& facts, std::string_view kind)
{
    std::vector<record_fact> out;
    std::copy_if(facts.begin(), facts.end(), std::back_inserter(out),
                 [&](const record_fact& f) { return f.kind == kind; });
    return out;
}

std::vector<pid_t> thread_tids(const std::vector<record_fact>& facts, std::string_view label)
{
    std::vector<pid_t> tids;
    for (const auto& f : facts) {
        if (f.kind == "thread" && (label.empty() || f.label() == label))
            tids.push_back(f.id());
    }
    return tids;
}

std::vector<record_fact> wait_for_fact(const std::string& path, std::string_view kind, std::size_t min_count,
                                       milliseconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<record_fact> facts;
    for (;;) {
        if (auto text = read_text_file(path))
            facts = parse_record(*text);
        if (count_kind(facts, kind) >= min_count)
            return facts;
        if (std::chrono::steady_clock::now() > deadline)
            break;
        std::this_thread::sleep_for(milliseconds{5});
    }
    throw std::runtime_error(fmt::format("record {} has {} '{}' facts, not {}, after {} ms:\n{}", path,
                                         count_kind(facts, kind), kind, min_count, timeout.count(),
                                         format_record(facts)));
}

std::string format_record(const std::vector<record_fact>& facts, std::size_t max_lines)
{
    std::string out;
    std::size_t shown = std::min(facts.size(), max_lines);
    for (std::size_t i = 0; i < shown; ++i)
        out += facts[i].line + "\n";
    if (facts.size() > shown)
        out += fmt::format("... ({} more lines)\n", facts.size() - shown);
    return out;
}

}  // namespace tdctl::test
