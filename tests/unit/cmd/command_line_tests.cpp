// Splitting command lines, reading durations and counts, and quoting words in messages.
#include <doctest/doctest.h>

#include "base/quoting.hpp"
#include "cmd/command_line.hpp"
#include "cmd/commands.hpp"

using namespace tdctl::cmd;
using tdctl::quoted_word;
using tdctl::word_excerpt;

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

TEST_CASE("a word in a message: whole up to 80 bytes, else its start and its length")
{
    CHECK(quoted_word("frob") == "'frob'");
    CHECK(quoted_word("") == "''");
    CHECK(word_excerpt("frob") == "frob");
    const std::string eighty(80, 'a');
    CHECK(quoted_word(eighty) == "'" + eighty + "'");
    CHECK(quoted_word(eighty + "b") == "'" + eighty + "...' (81 bytes)");
    CHECK(word_excerpt(std::string(10240, 'w')) == std::string(80, 'w') + "... (10240 bytes)");
    // Never half a UTF-8 sequence: "é" is 2 bytes, the 80th byte would split one.
    std::string accents = std::string(79, 'a');
    for (int i = 0; i < 10; ++i)
        accents += "\xc3\xa9";
    CHECK(word_excerpt(accents) == std::string(79, 'a') + "... (99 bytes)");
    // The options' messages quote the value the same way.
    const run_option_grammar g{option_for | option_count, run_option_grammar::operand_kind::none, "", "usage: x"};
    const std::string bad = std::string(5000, '9') + "x";
    CHECK(parse_run_options({"x", "--count", bad}, 1, g).error() == "bad count '" + std::string(80, '9') +
                                                                         "...' (5001 bytes)");
    CHECK(parse_run_options({"x", "--for", "0"}, 1, g).error() == "bad duration '0'");
    // A message made elsewhere: each long word of it cut, the rest kept.
    CHECK(tdctl::long_words_cut("cannot run " + std::string(200, 'p') + ": No such file") ==
          "cannot run " + std::string(80, 'p') + "... (201 bytes) No such file");
    CHECK(tdctl::long_words_cut("") == "");
    CHECK(tdctl::long_words_cut(" a  b ") == " a  b ");
}
