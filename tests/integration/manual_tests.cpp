// The manual page: `cmake --install` puts it where `man` finds it, `man -l`
// renders it, and it cannot drift from the program: every command `help`
// lists is documented in COMMANDS with every word and option of its `help
// COMMAND` synopsis, every option `tdctl --help` lists is in OPTIONS, and
// every example `tdctl --help` ends with is in EXAMPLES. `help COMMAND
// SUBCOMMAND` gives the command's help.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

/// A directory removed with its contents.
struct temp_dir : tdctl::test::temp_directory {
    temp_dir() : temp_directory("tdctl-install") {}
};

std::string read_all(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

/// The roff source between `.SH NAME` and the next `.SH`.
std::string section(const std::string& roff, const std::string& name)
{
    auto start = roff.find(".SH " + name + "\n");
    REQUIRE_MESSAGE(start != std::string::npos, "no section ", name);
    auto end = roff.find("\n.SH ", start + 1);
    return roff.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

/// The arguments of a roff macro line, split at blanks outside double quotes.
std::vector<std::string> macro_arguments(const std::string& rest)
{
    std::vector<std::string> args;
    std::string arg;
    bool quoted = false, any = false;
    for (char c : rest) {
        if (c == '"') {
            quoted = !quoted;
            any = true;
        } else if (c == ' ' && !quoted) {
            if (any || !arg.empty())
                args.push_back(arg);
            arg.clear();
            any = false;
        } else {
            arg += c;
        }
    }
    if (any || !arg.empty())
        args.push_back(arg);
    return args;
}

/// One roff line as the reader sees its words: font macros' arguments joined
/// (the alternating ones, .BR .BI .IR ..., without a blank), font escapes
/// dropped, `\-` a minus, `\(ga` a grave accent, `\&` nothing.
std::string plain_line(const std::string& line)
{
    std::string text = line;
    static const std::regex font_macro(R"(^\.(BR|BI|IB|IR|RB|RI|SM|SB|B|I)(?: (.*))?$)");
    std::smatch m;
    if (std::regex_match(line, m, font_macro)) {
        const bool alternating = m[1].length() == 2 && m[1] != "SM" && m[1] != "SB";
        text.clear();
        for (const auto& arg : macro_arguments(m[2].str()))
            text += (text.empty() || alternating ? "" : " ") + arg;
    } else if (line.starts_with(".")) {
        return "";
    }
    static const std::regex font_escape(R"(\\f[BIRP])");
    text = std::regex_replace(text, font_escape, "");
    text = std::regex_replace(text, std::regex(R"(\\\(ga)"), "`");
    text = std::regex_replace(text, std::regex(R"(\\-)"), "-");
    text = std::regex_replace(text, std::regex(R"(\\&)"), "");
    return text;
}

/// One `.TP` paragraph of a section: its tag line and its body, as plain text.
struct tagged_item {
    std::string tag, text;
};

std::vector<tagged_item> tagged_items(const std::string& roff_section)
{
    std::vector<tagged_item> items;
    std::istringstream in(roff_section);
    bool in_item = false, tag_next = false;
    for (std::string line; std::getline(in, line);) {
        if (line == ".TP") {
            items.emplace_back();
            in_item = tag_next = true;
            continue;
        }
        if (line.starts_with(".SH") || line.starts_with(".SS") || line == ".PP") {
            in_item = false;
            continue;
        }
        if (!in_item)
            continue;
        const std::string text = plain_line(line);
        if (tag_next) {
            items.back().tag = text;
            tag_next = false;
        }
        items.back().text += text + "\n";
    }
    return items;
}

/// The words a tag names a command by: its first word, and each word after
/// a "|" or after a word that ends with a comma (`continue | interrupt`,
/// `event set ..., event clear ...`).
std::set<std::string> tag_commands(const std::string& tag)
{
    std::set<std::string> names;
    std::istringstream in(tag);
    std::string word, previous;
    for (bool first = true; in >> word; first = false) {
        if (first || previous == "|" || previous.ends_with(","))
            names.insert(word);
        previous = word;
    }
    return names;
}

/// The commands of `help`'s list: the first word of each line indented by
/// two, and each word after " | " on such a line.
std::set<std::string> help_commands(const std::string& help)
{
    std::set<std::string> names;
    std::istringstream in(help);
    static const std::regex entry(R"(^  ([a-z]+))"), alternative(R"(\| ([a-z]+))");
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (!std::regex_search(line, m, entry))
            continue;
        names.insert(m[1].str());
        for (auto it = std::sregex_iterator(line.begin(), line.end(), alternative); it != std::sregex_iterator(); ++it)
            names.insert((*it)[1].str());
    }
    return names;
}

/// The subcommands, keywords and options of `help COMMAND`'s synopsis lines
/// (the unindented lines that start with the command; a description after
/// two blanks is left out): `rusage collect [TID|all] [--interval SECONDS
/// [--count N]]` gives collect, all, --interval and --count. Placeholders
/// (upper case) are left out.
std::set<std::string> synopsis_words(const std::string& command, const std::string& help)
{
    std::set<std::string> words;
    std::istringstream in(help);
    static const std::regex separators(R"([\s\[\]|=]+)"), word(R"(^(--[a-z][a-z-]*|[a-z][a-z_]*)$)");
    for (std::string line; std::getline(in, line);) {
        if (line != command && !line.starts_with(command + " "))
            continue;
        line = line.substr(0, line.find("  "));
        bool first = true;
        for (auto it = std::sregex_token_iterator(line.begin(), line.end(), separators, -1);
             it != std::sregex_token_iterator(); ++it) {
            const std::string w = *it;
            if (w.empty())
                continue;
            if (!first && std::regex_match(w, word))
                words.insert(w);
            first = false;
        }
    }
    return words;
}

/// Whether `word` stands in `text` as a word of its own (not inside a longer
/// name or option).
bool has_word(const std::string& text, const std::string& word)
{
    for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
        auto part_of_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; };
        const bool starts = at == 0 || !part_of_name(text[at - 1]);
        const bool ends = at + word.size() == text.size() || !part_of_name(text[at + word.size()]);
        if (starts && ends)
            return true;
    }
    return false;
}

/// The example command lines at the end of `tdctl --help`: each line after
/// "Examples:" up to its description (two blanks or more).
std::vector<std::string> help_examples(const std::string& usage)
{
    std::vector<std::string> examples;
    auto at = usage.rfind("Examples:\n");
    REQUIRE_MESSAGE(at != std::string::npos, usage);
    std::istringstream tail(usage.substr(at));
    std::string line;
    std::getline(tail, line);
    while (std::getline(tail, line)) {
        if (line.empty())
            continue;
        CHECK_MESSAGE(line.starts_with("  tdctl "), line);
        line = line.substr(2);
        examples.push_back(line.substr(0, line.find("  ")));
    }
    return examples;
}

/// An example as a pattern over the manual page's examples: PID stands for
/// a process ID, "PROG ARGS" for a program and its arguments.
std::regex example_pattern(const std::string& example)
{
    std::string pattern;
    for (char c : example) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos)
            pattern += '\\';
        pattern += c;
    }
    pattern = std::regex_replace(pattern, std::regex("PROG ARGS"), ".+");
    pattern = std::regex_replace(pattern, std::regex("PID"), "[0-9]+");
    return std::regex("^" + pattern + "$");
}

}  // namespace

TEST_CASE("cmake --install puts tdctl.1 in share/man/man1 and man -l renders it")
{
    auto man = find_program("man");
    if (!man)
        skip_test("man (man-db) is not installed; scripts/setup-debian.sh installs it");
    temp_dir prefix;
    auto install = run_command({TDCTL_CMAKE_COMMAND, "--install", TDCTL_BINARY_DIR, "--prefix", prefix.path()}, 60s);
    REQUIRE_MESSAGE(install.status.is_success(), install.describe());
    const std::string page = prefix.path() + "/share/man/man1/tdctl.1";
    REQUIRE_MESSAGE(std::filesystem::exists(page), install.describe());
    run_options plain;
    plain.env = {{"MANWIDTH", "80"}, {"MANPAGER", "cat"}, {"PAGER", "cat"}, {"LC_ALL", "C"}};
    auto shown = run_command({*man, "-l", page}, 30s, plain);
    INFO(shown.describe());
    REQUIRE(shown.status.is_success());
    for (const char* heading : {"NAME", "SYNOPSIS", "OPTIONS", "COMMANDS", "EXIT STATUS", "EXAMPLES"})
        CHECK_MESSAGE(shown.out.find(heading) != std::string::npos, "no ", heading);
    CHECK(shown.out.find("thread debugger controller") != std::string::npos);
    CHECK(shown.err.find("warning") == std::string::npos);
}

TEST_CASE("every command `help` lists is in the manual page's COMMANDS with its subcommands and options")
{
    require_ptrace();
    const auto items = tagged_items(section(read_all(TDCTL_MAN_SOURCE), "COMMANDS"));
    REQUIRE(items.size() >= 15);
    // `help` as the program prints it (a launch: the records are on stderr).
    auto listed = run_tdctl({"--json", "-e", "help", "--", "/bin/true"}, 30s);
    auto help = listed.of_type("help");
    REQUIRE_MESSAGE(help.size() == 1, listed.describe());
    const auto commands = help_commands(help[0].value("text", ""));
    REQUIRE(commands.size() >= 15);

    std::vector<std::string> args{"--json"};
    for (const auto& c : commands) {
        args.push_back("-e");
        args.push_back("help " + c);
    }
    args.insert(args.end(), {"--", "/bin/true"});
    auto each = run_tdctl(args, 30s);
    auto texts = each.of_type("help");
    REQUIRE_MESSAGE(texts.size() == commands.size(), each.describe());

    int words_checked = 0;
    auto text = texts.begin();
    for (const auto& c : commands) {
        // The synopsis goes in the item's tag, where a reader looks for it.
        std::string documented;
        for (const auto& item : items)
            if (tag_commands(item.tag).contains(c))
                documented += item.tag + "\n";
        CHECK_MESSAGE(!documented.empty(), "`help` lists `", c, "`; no item of the manual page's COMMANDS names it");
        for (const auto& w : synopsis_words(c, (text++)->value("text", ""))) {
            ++words_checked;
            CHECK_MESSAGE(has_word(documented, w), "`help ", c, "` names `", w,
                          "`; no tag of the manual page's COMMANDS that names `", c, "` does");
        }
    }
    CHECK(words_checked >= 30);
}

TEST_CASE("every option tdctl --help lists is in the manual page's OPTIONS")
{
    // Each option in an item's tag (`-x FILE, --command FILE`), not only in
    // the text of another's.
    std::string options_text;
    for (const auto& item : tagged_items(section(read_all(TDCTL_MAN_SOURCE), "OPTIONS")))
        options_text += item.tag + "\n";
    auto usage = run_command({tdctl_path(), "--help"}, 30s);
    REQUIRE(usage.status.is_success());
    // The option table, not the footer (whose examples hold commands' options).
    const std::string table = usage.out.substr(0, usage.out.find("Usage: tdctl [options]"));
    static const std::regex option(R"((?:^|[\s,])(--?[a-z][a-z-]*))");
    int seen = 0;
    for (auto it = std::sregex_iterator(table.begin(), table.end(), option); it != std::sregex_iterator(); ++it) {
        const std::string name = (*it)[1];
        ++seen;
        CHECK_MESSAGE(has_word(options_text, name), "--help names ", name, "; the manual page's OPTIONS does not");
    }
    CHECK(seen >= 16);
}

// `tdctl --help` ended with the exit statuses: nothing to start from.
TEST_CASE("tdctl --help ends with examples, deadlock and locks among them, each in the manual page's EXAMPLES")
{
    auto usage = run_command({tdctl_path(), "--help"}, 30s);
    REQUIRE(usage.status.is_success());
    const auto examples = help_examples(usage.out);
    CHECK(examples.size() >= 5);
    auto any_has = [&](const std::string& word) {
        return std::any_of(examples.begin(), examples.end(), [&](const auto& e) { return has_word(e, word); });
    };
    CHECK(any_has("deadlock"));
    CHECK(any_has("locks"));

    std::vector<std::string> tags;
    for (const auto& item : tagged_items(section(read_all(TDCTL_MAN_SOURCE), "EXAMPLES")))
        tags.push_back(item.tag);
    for (const auto& e : examples) {
        const auto pattern = example_pattern(e);
        CHECK_MESSAGE(std::any_of(tags.begin(), tags.end(), [&](const auto& t) { return std::regex_match(t, pattern); }),
                      "--help's example `", e, "` is not in the manual page's EXAMPLES");
    }
}

// `help event set` was a usage error: help takes the command's first word.
TEST_CASE("help with a subcommand gives the command's help")
{
    require_ptrace();
    auto run = run_tdctl({"-e", "help event set", "-e", "help stats show", "--", "true"}, 30s);
    INFO(run.describe());
    CHECK(run.result.status.exit_code() == 0);
    CHECK(run.result.out.find("event set EVENTS [TID]") != std::string::npos);
    CHECK(run.result.out.find("stats enable") != std::string::npos);
}
