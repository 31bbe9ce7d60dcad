// Splitting command lines and reading durations and counts.
#include <doctest/doctest.h>

#include "cmd/command_line.hpp"
#include "cmd/commands.hpp"

using namespace tdctl::cmd;

TEST_CASE("words, quotes, escapes, comments")
{
    CHECK(*split_words("watch create,death --count 5") ==
          std::vector<std::string>{"watch", "create,death", "--count", "5"});
    CHECK(*split_words("  event   set  create  ") == std::vector<std::string>{"event", "set", "create"});
    CHECK(*split_words("a \"b c\" 'd e' f\\ g") == std::vector<std::string>{"a", "b c", "d e", "f g"});
    CHECK(*split_words("x\"y z\"w") == std::vector<std::string>{"xy zw"});
    CHECK(*split_words("threads # list them") == std::vector<std::string>{"threads"});
    CHECK(*split_words("a#b") == std::vector<std::string>{"a#b"});
    CHECK(split_words("# only a comment")->empty());
    CHECK(split_words("")->empty());
    CHECK(*split_words("'it''s'") == std::vector<std::string>{"its"});
    CHECK(*split_words("\"a\\\"b\"") == std::vector<std::string>{"a\"b"});
}

TEST_CASE("unterminated quotes are errors")
{
    CHECK_FALSE(split_words("watch \"create"));
    CHECK_FALSE(split_words("watch 'create"));
}

TEST_CASE("durations")
{
    CHECK(*parse_duration("2") == doctest::Approx(2.0));
    CHECK(*parse_duration("1.5") == doctest::Approx(1.5));
    CHECK(*parse_duration("500ms") == doctest::Approx(0.5));
    CHECK(*parse_duration("2s") == doctest::Approx(2.0));
    CHECK(*parse_duration("3m") == doctest::Approx(180.0));
    for (const char* bad : {"", "0", "-1", "x", "1x", "nan", "inf", "ms", "1.5.5"})
        CHECK_FALSE(parse_duration(bad));
}

TEST_CASE("counts")
{
    CHECK(*parse_count("0") == 0);
    CHECK(*parse_count("4008") == 4008);
    for (const char* bad : {"", "-1", "1.5", "x", "12x", "99999999999999999999999"})
        CHECK_FALSE(parse_count(bad));
}

TEST_CASE("help covers every command")
{
    for (const char* c : {"threads", "event", "stop", "watch", "sleep", "continue", "interrupt", "detach", "kill",
                          "quit", "help"})
        CHECK_FALSE(help_text(c).empty());
    CHECK(help_text("bogus").empty());
    CHECK(help_text("").find("watch") != std::string::npos);
}
