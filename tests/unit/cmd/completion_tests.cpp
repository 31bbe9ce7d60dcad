// Tab completion at the prompt (cmd/completion.hpp) on canned lines: what
// fits the word under the cursor, and what the candidates share.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cmd/completion.hpp"

using tdctl::cmd::common_prefix;
using tdctl::cmd::complete_line;

namespace {

using words = std::vector<std::string>;

words candidates(std::string_view line, const std::vector<pid_t>& tids = {})
{
    return complete_line(line, tids).candidates;
}

}  // namespace

TEST_CASE("the first word: commands")
{
    CHECK(candidates("wat") == words{"watch"});
    CHECK(candidates("st") == words{"stats", "stop"});
    CHECK(candidates("  ru") == words{"run", "rusage"});
    CHECK(candidates("xyz").empty());
    CHECK(candidates("").size() >= 15);
}

TEST_CASE("subcommands, event names, on/off")
{
    CHECK(candidates("event s") == words{"set"});
    CHECK(candidates("event ") == words{"addr", "clear", "enable", "getmsg", "set"});
    CHECK(candidates("stats w") == words{"watch"});
    CHECK(candidates("rusage c") == words{"collect"});
    CHECK(candidates("event set cr") == words{"create"});
    CHECK(candidates("event enable o") == words{"off", "on"});
    CHECK(candidates("watch de") == words{"death"});
    CHECK(candidates("stop a") == words{"all"});
}

TEST_CASE("an event list completes the name after the last comma")
{
    auto c = complete_line("watch create,de", {});
    CHECK(c.partial == "de");
    CHECK(c.candidates == words{"death"});
}

TEST_CASE("options, and --sort's columns")
{
    CHECK(candidates("watch --c") == words{"--count"});
    CHECK(candidates("top --s") == words{"--sort"});
    CHECK(candidates("top --sort w") == words{"wait"});
    CHECK(candidates("stats watch --i") == words{"--interval"});
    CHECK(candidates("watch --for ").empty());   // a duration: nothing to offer
}

TEST_CASE("TIDs after commands that take one")
{
    const std::vector<pid_t> tids{4242, 4250, 5001};
    CHECK(candidates("lwpinfo 42", tids) == words{"4242", "4250"});
    CHECK(candidates("bt 5", tids) == words{"5001"});
    CHECK(candidates("lwpinfo a", tids) == words{"all"});
    CHECK(candidates("event getmsg 4", tids) == words{"4242", "4250"});
    CHECK(candidates("event set create 50", tids) == words{"5001"});
    CHECK(candidates("event enable on ", tids) == words{"4242", "4250", "5001", "all"});
    CHECK(candidates("lwpinfo 4", {}).empty());   // no target
}

TEST_CASE("common_prefix")
{
    CHECK(common_prefix({"4242", "4250"}) == "42");
    CHECK(common_prefix({"watch"}) == "watch");
    CHECK(common_prefix({}).empty());
    CHECK(common_prefix({"on", "off"}) == "o");
}
