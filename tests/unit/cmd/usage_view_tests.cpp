// `top`'s table and the time split, from canned usage windows (no target).
#include <doctest/doctest.h>

#include "cmd/command_line.hpp"
#include "cmd/usage_view.hpp"

using namespace tdctl;
using namespace tdctl::cmd;

namespace {

constexpr std::uint64_t second = 1000000000ULL;

core::lwp_window_usage lwp(pid_t tid, const char* name, std::uint64_t cpu_ns, std::uint64_t wait_ns,
                           std::uint64_t alive_ns)
{
    core::lwp_window_usage u;
    u.tid = tid_t{tid};
    u.name = name;
    u.grown.cpu_ns = cpu_ns;
    u.grown.wait_ns = wait_ns;
    u.alive_ns = alive_ns;
    return u;
}

}  // namespace

TEST_CASE("rates: percent of one CPU over the window, split in the utime:stime ratio; counts per second")
{
    auto u = lwp(7, "w", second / 2, second / 4, 2 * second);
    u.grown.utime_ticks = 30;
    u.grown.stime_ticks = 10;
    u.grown.nvcsw = 10;
    u.grown.nivcsw = 4;
    u.grown.minflt = 100;
    u.grown.majflt = 2;
    auto r = core::rates_of(u, 2 * second);
    CHECK(r.usr == doctest::Approx(18.75));
    CHECK(r.sys == doctest::Approx(6.25));
    CHECK(r.wait == doctest::Approx(12.5));
    CHECK(r.off == doctest::Approx(62.5));
    CHECK(r.cswch == doctest::Approx(5));
    CHECK(r.nvcswch == doctest::Approx(2));
    CHECK(r.minflt == doctest::Approx(50));
    CHECK(r.majflt == doctest::Approx(1));
    // No tick charged: all user time (the kernel's own split).
    CHECK(core::rates_of(lwp(7, "w", second / 10, 0, second), second).usr == doctest::Approx(10));
    CHECK(core::rates_of(lwp(7, "w", second, 0, second), 0).usr == 0);
}

TEST_CASE("off CPU is alive minus on CPU minus waiting, never below 0")
{
    CHECK(lwp(1, "a", 300, 200, 1000).off_ns() == 500);
    // A wait charged late can make on + wait exceed the time alive.
    CHECK(lwp(1, "a", 700, 500, 1000).off_ns() == 0);
    // A thread alive for part of the window: its shares add up to that part.
    auto r = core::rates_of(lwp(1, "a", second / 10, 0, second / 2), second);
    CHECK(r.usr + r.sys + r.wait + r.off == doctest::Approx(50));
}

TEST_CASE("top_table: the process line sums every thread's CPU, rows are ordered and cut")
{
    core::window_usage w;
    w.window_ns = second;
    w.lwps = {lwp(10, "main", 0, 0, second), lwp(11, "spin", second * 9 / 10, second / 10, second),
              lwp(12, "wait", second / 3, second * 2 / 3, second), lwp(13, "nap", second / 100, 0, second)};
    w.lwps[3].born = true;
    w.lwps[3].ended = true;
    auto t = top_table(w, top_view{10, "prog", top_column::cpu, std::nullopt}, 5.0);
    REQUIRE(t.rows.size() == 4);
    CHECK(t.rows[0].tid == 11);
    CHECK(t.rows[1].tid == 12);
    CHECK(t.rows[2].tid == 13);
    CHECK(t.rows[3].tid == 10);
    CHECK(t.rows[2].born);
    CHECK(t.rows[2].ended);
    CHECK(t.process.threads == 4);
    CHECK(t.process.born == 1);
    CHECK(t.process.ended == 1);
    CHECK(t.process.rates.usr + t.process.rates.sys == doctest::Approx(90 + 100.0 / 3 + 1));
    // Run-queue wait and off CPU as shares of the 4 thread-seconds alive.
    CHECK(t.process.thread_seconds == doctest::Approx(4.0));
    CHECK(t.process.rates.wait == doctest::Approx(100.0 * (0.1 + 2.0 / 3) / 4));
    CHECK(t.process.rates.off == doctest::Approx(100.0 * (1 + 0.99) / 4));
    CHECK(t.process.interval == doctest::Approx(1.0));
    CHECK(t.rows[0].time == 5.0);

    auto by_wait = top_table(w, top_view{10, "prog", top_column::wait, 2}, 5.0);
    REQUIRE(by_wait.rows.size() == 2);
    CHECK(by_wait.rows[0].tid == 12);
    CHECK(by_wait.rows[1].tid == 11);
    CHECK(by_wait.process.threads == 4);   // the cut rows still count

    auto by_off = top_table(w, top_view{10, "prog", top_column::off, std::nullopt}, 5.0);
    CHECK(by_off.rows[0].tid == 10);   // main is off CPU all the time, nap 99 %
    auto by_name = top_table(w, top_view{10, "prog", top_column::name, std::nullopt}, 5.0);
    CHECK(by_name.rows[0].name == "main");
    CHECK(by_name.rows[3].name == "wait");
    auto by_tid = top_table(w, top_view{10, "prog", top_column::tid, 1}, 5.0);
    REQUIRE(by_tid.rows.size() == 1);
    CHECK(by_tid.rows[0].tid == 10);
}

TEST_CASE("sort columns by name")
{
    for (const char* word : {"cpu", "usr", "sys", "wait", "off", "cswch", "nvcswch", "minflt", "majflt", "tid", "name"})
        CHECK(parse_top_column(word).has_value());
    CHECK(parse_top_column("CPU") == std::nullopt);
    CHECK(parse_top_column("") == std::nullopt);
    CHECK(*parse_top_column("wait") == top_column::wait);
}

TEST_CASE("time_split_rows: most runnable first; beyond the limit one row sums the rest")
{
    core::window_usage w;
    w.window_ns = 2 * second;
    for (int i = 0; i < 5; ++i)
        w.lwps.push_back(lwp(100 + i, "t", static_cast<std::uint64_t>(i) * second / 10, second / 10, 2 * second));
    auto all = time_split_rows(w, "sleep", 100, 3.0, 5);
    REQUIRE(all.size() == 5);
    CHECK(all[0].tid == 104);
    CHECK(all[4].tid == 100);
    CHECK(all[0].command == "sleep");
    CHECK(all[0].on_cpu == doctest::Approx(0.4));
    CHECK(all[0].wait == doctest::Approx(0.1));
    CHECK(all[0].off == doctest::Approx(1.5));
    CHECK(all[0].duration == doctest::Approx(2.0));
    // One more than the limit: shown, not folded into a row of one.
    CHECK(time_split_rows(w, "sleep", 100, 3.0, 4).size() == 5);
    auto cut = time_split_rows(w, "watch", 100, 3.0, 2);
    REQUIRE(cut.size() == 3);
    CHECK(cut[0].tid == 104);
    CHECK(cut[1].tid == 103);
    CHECK(cut[2].folded == 3);
    CHECK(cut[2].tid == 0);
    CHECK(cut[2].on_cpu == doctest::Approx(0.3));
    CHECK(cut[2].wait == doctest::Approx(0.3));
    CHECK(cut[2].off == doctest::Approx(5.4));
    // Its shares are of its three threads' lives together (3 × 2 s): 100 % in all.
    CHECK(cut[2].duration == doctest::Approx(6.0));
    CHECK(cut[2].on_cpu + cut[2].wait + cut[2].off == doctest::Approx(cut[2].duration));
    CHECK(cut[2].text().find("(90.0%)") != std::string::npos);
    CHECK(time_split_rows(core::window_usage{}, "sleep", 1, 0, 32).empty());
}

TEST_CASE("top_table: the process line's %wait and %off are shares of its threads' time, not sums")
{
    // Six blocked threads were 600 % off CPU when the line summed the rows.
    core::window_usage blocked;
    blocked.window_ns = 2 * second;
    for (pid_t t = 20; t < 26; ++t)
        blocked.lwps.push_back(lwp(t, "idle", 0, 0, 2 * second));
    auto idle = top_table(blocked, top_view{20, "prog", top_column::cpu, std::nullopt}, 1.0);
    CHECK(idle.process.rates.off == doctest::Approx(100));
    CHECK(idle.process.rates.wait == 0);
    CHECK(idle.process.rates.usr + idle.process.rates.sys == 0);
    CHECK(idle.process.thread_seconds == doctest::Approx(12));

    // Two threads on two CPUs: 200 % CPU as pidstat's process line; one born
    // halfway counts the half it lived; cut rows count too.
    core::window_usage busy;
    busy.window_ns = second;
    busy.lwps = {lwp(30, "main", second / 2, second / 4, second), lwp(31, "spin", second, 0, second),
                 lwp(32, "new", second / 4, 0, second / 2)};
    busy.lwps[2].born = true;
    auto both = top_table(busy, top_view{30, "prog", top_column::cpu, 1}, 1.0);
    REQUIRE(both.rows.size() == 1);
    CHECK(both.process.rates.usr + both.process.rates.sys == doctest::Approx(175));
    CHECK(both.process.thread_seconds == doctest::Approx(2.5));
    CHECK(both.process.rates.wait == doctest::Approx(100.0 * 0.25 / 2.5));
    CHECK(both.process.rates.off == doctest::Approx(100.0 * (0.25 + 0.25) / 2.5));
    // On CPU, waiting and off add up to the thread time.
    const auto& p = both.process.rates;
    CHECK((p.usr + p.sys) / 100 * both.process.interval / both.process.thread_seconds * 100 + p.wait + p.off ==
          doctest::Approx(100));
    // An empty window: no division by zero.
    auto none = top_table(core::window_usage{}, top_view{30, "prog", top_column::cpu, std::nullopt}, 1.0);
    CHECK(none.process.rates.wait == 0);
    CHECK(none.process.rates.off == 0);
}

TEST_CASE("top's options: --sort takes a word, --limit a count")
{
    const run_option_grammar g{option_interval | option_count | option_sort | option_limit,
                               run_option_grammar::operand_kind::none, "", "usage: top"};
    auto o = parse_run_options({"top", "--sort", "wait", "--limit", "5", "--interval", "2"}, 1, g);
    REQUIRE(o.has_value());
    CHECK(*o->sort == "wait");
    CHECK(*o->limit == 5);
    CHECK(*o->interval == doctest::Approx(2));
    CHECK(parse_run_options({"top", "--limit", "0"}, 1, g).error() == "bad limit '0'");
    CHECK(parse_run_options({"top", "--limit", "x"}, 1, g).error() == "bad limit 'x'");
    CHECK(parse_run_options({"top", "--count", "0"}, 1, g).error() == "bad count '0'");
    CHECK(parse_run_options({"top", "--sort"}, 1, g).error() == "usage: top");
    // Not an option of a grammar without it.
    const run_option_grammar watch{option_count, run_option_grammar::operand_kind::none, "", "usage: watch"};
    CHECK(parse_run_options({"watch", "--limit", "3"}, 1, watch).error() == "usage: watch");
    CHECK(parse_run_options({"watch", "--bt"}, 1, watch).error() == "usage: watch");
}

TEST_CASE("parse_run_options: --bt and --bt=DEPTH, one word each")
{
    const run_option_grammar g{option_count | option_bt, run_option_grammar::operand_kind::plain, "",
                               "usage: watch"};
    auto plain = parse_run_options({"watch", "create", "--bt", "--count", "3"}, 1, g);
    REQUIRE(plain.has_value());
    CHECK(*plain->bt == default_bt_depth);
    CHECK(plain->operand == "create");
    CHECK(*plain->count == 3);
    auto depth = parse_run_options({"watch", "--bt=5"}, 1, g);
    REQUIRE(depth.has_value());
    CHECK(*depth->bt == 5);
    CHECK_FALSE(parse_run_options({"watch"}, 1, g)->bt.has_value());
    CHECK(parse_run_options({"watch", "--bt=0"}, 1, g).error() == "bad bt depth '0'");
    CHECK(parse_run_options({"watch", "--bt=x"}, 1, g).error() == "bad bt depth 'x'");
    CHECK(parse_run_options({"watch", "--bt="}, 1, g).error() == "bad bt depth ''");
    CHECK(parse_run_options({"watch", "--btx"}, 1, g).error() == "usage: watch");
}

TEST_CASE("parse_run_options: --stream, --drop and --stop are flags of the grammars that take them")
{
    const run_option_grammar g{option_count | option_stream | option_drop | option_stop,
                               run_option_grammar::operand_kind::plain, "", "usage: watch"};
    auto none = parse_run_options({"watch", "create"}, 1, g);
    REQUIRE(none.has_value());
    CHECK_FALSE(none->stream);
    CHECK_FALSE(none->drop);
    CHECK_FALSE(none->stop);
    auto stop = parse_run_options({"watch", "--stop", "create"}, 1, g);
    REQUIRE(stop.has_value());
    CHECK(stop->stop);
    CHECK(stop->operand == "create");
    auto both = parse_run_options({"watch", "--stream", "--drop"}, 1, g);
    REQUIRE(both.has_value());
    CHECK(both->stream);
    CHECK(both->drop);
    CHECK_FALSE(both->stop);
    // Not an option of a grammar without it (`stop` takes --for only).
    const run_option_grammar stop_cmd{option_for, run_option_grammar::operand_kind::any, "", "usage: stop"};
    auto as_operand = parse_run_options({"stop", "--stop"}, 1, stop_cmd);
    REQUIRE(as_operand.has_value());
    CHECK(as_operand->operand == "--stop");
    const run_option_grammar locks{option_for, run_option_grammar::operand_kind::none, "", "usage: locks"};
    CHECK(parse_run_options({"locks", "--stop"}, 1, locks).error() == "usage: locks");
}

TEST_CASE("locks' options: --top takes a count, --interval and --for durations, --bt=DEPTH")
{
    const run_option_grammar g{option_for | option_interval | option_top | option_bt,
                               run_option_grammar::operand_kind::none, "", "usage: locks"};
    auto o = parse_run_options({"locks", "--top", "3", "--interval", "500ms", "--for", "2", "--bt=4"}, 1, g);
    REQUIRE(o.has_value());
    CHECK(*o->top == 3);
    CHECK(*o->interval == doctest::Approx(0.5));
    CHECK(*o->for_seconds == doctest::Approx(2));
    CHECK(*o->bt == 4);
    CHECK_FALSE(o->limit.has_value());
    CHECK(parse_run_options({"locks", "--top", "0"}, 1, g).error() == "bad top '0'");
    CHECK(parse_run_options({"locks", "--limit", "3"}, 1, g).error() == "usage: locks");
    // --top is no option of a grammar without it (summary parses its own).
    const run_option_grammar top{option_limit, run_option_grammar::operand_kind::none, "", "usage: top"};
    CHECK(parse_run_options({"top", "--top", "3"}, 1, top).error() == "usage: top");
}
