// The manual page (issue 12): `cmake --install` puts it where `man` finds
// it, `man -l` renders it, and it cannot drift from the program: every
// command `help` lists and every option `tdctl --help` lists is in it.
// `tdctl --help` ends with the three most useful examples.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

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

/// The words set in bold (.B, .BR, .BI lines) of a roff text, quotes and
/// roff escapes removed: the names a section documents.
std::set<std::string> bold_words(const std::string& roff)
{
    std::set<std::string> words;
    std::istringstream in(roff);
    for (std::string line; std::getline(in, line);) {
        if (!line.starts_with(".B"))
            continue;
        std::istringstream w(line.substr(line.find(' ') == std::string::npos ? line.size() : line.find(' ')));
        for (std::string word; w >> word;) {
            std::string plain;
            for (char c : word)
                if (c != '"' && c != '\\')
                    plain += c;
            words.insert(plain);
        }
    }
    return words;
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

TEST_CASE("every command `help` lists and every option --help lists is in the manual page")
{
    require_ptrace();
    const std::string roff = read_all(TDCTL_MAN_SOURCE);
    REQUIRE(!roff.empty());
    // `help` as the program prints it (a launch: the records are on stderr).
    auto run = run_tdctl({"--json", "-e", "help", "--", "/bin/true"}, 30s);
    INFO(run.describe());
    auto help = run.of_type("help");
    REQUIRE(help.size() == 1);
    const auto commands = help_commands(help[0].value("text", ""));
    REQUIRE(commands.size() >= 15);
    const auto documented = bold_words(section(roff, "COMMANDS"));
    for (const auto& c : commands)
        CHECK_MESSAGE(documented.contains(c), "`help` lists `", c, "`; the manual page's COMMANDS does not");

    auto usage = run_command({tdctl_path(), "--help"}, 30s);
    REQUIRE(usage.status.is_success());
    const std::string options_roff = section(roff, "OPTIONS");
    // The option table, not the footer (whose examples hold commands' options).
    const std::string table = usage.out.substr(0, usage.out.find("Usage: tdctl [options]"));
    static const std::regex long_option(R"((--[a-z][a-z-]+))");
    int seen = 0;
    for (auto it = std::sregex_iterator(table.begin(), table.end(), long_option); it != std::sregex_iterator(); ++it) {
        std::string escaped = (*it)[1];
        escaped.replace(0, 2, "\\-\\-");
        ++seen;
        CHECK_MESSAGE(options_roff.find(escaped) != std::string::npos, "--help names ", (*it)[1],
                      "; the manual page's OPTIONS does not");
    }
    CHECK(seen >= 8);
}

// `tdctl --help` ended with the exit statuses: nothing to start from.
TEST_CASE("tdctl --help ends with three examples")
{
    auto usage = run_command({tdctl_path(), "--help"}, 30s);
    REQUIRE(usage.status.is_success());
    auto at = usage.out.rfind("Examples:\n");
    REQUIRE_MESSAGE(at != std::string::npos, usage.out);
    std::istringstream tail(usage.out.substr(at));
    std::string line;
    std::getline(tail, line);
    int examples = 0;
    while (std::getline(tail, line))
        if (!line.empty()) {
            CHECK_MESSAGE(line.starts_with("  tdctl "), line);
            ++examples;
        }
    CHECK(examples == 3);
}
