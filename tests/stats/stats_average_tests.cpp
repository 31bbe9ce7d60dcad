// Acceptance 1–3 of the statistics issue (SPEC §6, seed 000): the four time
// averages of td_ta_stats_t compared with the kernel's schedstat and stat
// numbers read by the test in the same window; threads that live and die
// inside the window; enable / disable / reset; nthreads and r_concurrency.
#include <algorithm>
#include <cmath>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/stats/stats_support.hpp"

namespace tdctl::stats_test {
namespace {

using test::child_process;

constexpr double ns_per_s = 1e9;
// JSON times and windows are rounded to the microsecond.
constexpr double json_rounding = 2e-6;

/// `busy K M 0` with a record file, running once all its threads are up.
struct busy_target {
    test::temp_file record{"tdctl-stats-busy"};
    child_process child;
    busy_target(int k, int m)
        : child(child_process::spawn({test::fixture_path("busy"), "--record", record.path(), std::to_string(k),
                                      std::to_string(m), "0"}))
    {
        test::wait_for_fact(record.path(), "done", 1, 10s);
    }
    std::vector<pid_t> spinners() { return test::thread_tids(test::read_record(record.path()), "spin"); }
};

std::string describe(const core::stat_averages& a)
{
    auto f = [](const core::stat_fraction& x) { return fmt::format("{:.4f} ({}/{})", x.value(), x.num, x.den); };
    return fmt::format("nrunnable {}, a_concurrency {}, nlwps {}, nidle {}, window {:.6f} s", f(a.nrunnable),
                       f(a.a_concurrency), f(a.nlwps), f(a.nidle), a.window_seconds);
}

std::string describe(const core::thread_stats& st)
{
    return fmt::format("nthreads {} ({}), r_concurrency {} ({}), enabled {}; {}", st.td.nthreads, st.nthreads_source,
                       st.td.r_concurrency, st.r_concurrency_source, st.enabled, describe(st.averages));
}

/// The relations SPEC §6 fixes between the fields, on the 64-bit parts
/// (exact) and on the int fractions (within their rounding).
void check_relations(const core::thread_stats& st)
{
    INFO(describe(st));
    const auto& a = st.averages;
    // One window: every fraction has the same denominator.
    CHECK(a.nrunnable.den == a.nlwps.den);
    CHECK(a.a_concurrency.den == a.nlwps.den);
    CHECK(a.nidle.den == a.nlwps.den);
    CHECK(std::abs(static_cast<double>(a.nlwps.den) - a.window_seconds * ns_per_s) <= 2.0);
    // a_concurrency ≤ nrunnable ≤ nlwps, nidle = nlwps − nrunnable (exact).
    CHECK(a.a_concurrency.num <= a.nrunnable.num);
    CHECK(a.nrunnable.num <= a.nlwps.num);
    CHECK(a.nidle.num + a.nrunnable.num == a.nlwps.num);

    // The int fractions: each the 64-bit one halved together until it fits.
    auto check_int = [&](const char* name, int num, int den, const core::stat_fraction& wide) {
        INFO(name, ": int ", num, "/", den, " vs 64-bit ", wide.num, "/", wide.den);
        CHECK(num >= 0);
        CHECK(den >= 0);
        if (wide.den == 0) {
            CHECK(den == 0);
            return;
        }
        REQUIRE(den > 0);
        // Halving k times loses at most one unit of each part per halving step's
        // truncation: the ratio stays within 2/den of the exact one.
        double exact = wide.value();
        double approx = static_cast<double>(num) / den;
        CHECK(std::abs(approx - exact) <= 2.0 / den * std::max(1.0, exact));
        // Nothing halved that did not have to be.
        if (wide.num <= 0x7fffffffULL && wide.den <= 0x7fffffffULL) {
            CHECK(static_cast<std::uint64_t>(num) == wide.num);
            CHECK(static_cast<std::uint64_t>(den) == wide.den);
        } else {
            CHECK(std::max(num, den) > 0x3fffffff);
        }
    };
    check_int("nrunnable", st.td.nrunnable_num, st.td.nrunnable_den, a.nrunnable);
    check_int("a_concurrency", st.td.a_concurrency_num, st.td.a_concurrency_den, a.a_concurrency);
    check_int("nlwps", st.td.nlwps_num, st.td.nlwps_den, a.nlwps);
    check_int("nidle", st.td.nidle_num, st.td.nidle_den, a.nidle);
    if (st.td.nlwps_den > 0 && st.td.nrunnable_den > 0 && st.td.nidle_den > 0) {
        double nl = static_cast<double>(st.td.nlwps_num) / st.td.nlwps_den;
        double nr = static_cast<double>(st.td.nrunnable_num) / st.td.nrunnable_den;
        double ni = static_cast<double>(st.td.nidle_num) / st.td.nidle_den;
        CHECK(std::abs(ni - (nl - nr)) <= 1e-6 * std::max(1.0, nl));
    }
}

/// `value` within `rel` of `expected` (plus `abs_slack` for values near 0).
bool near(double value, double expected, double rel, double abs_slack = 0.0)
{
    return std::abs(value - expected) <= rel * std::abs(expected) + abs_slack;
}

/// The runnable share ((CPU + run-queue wait) / wall) of the tasks in `tids`
/// (or of all the others, with `others`) between two samples.
double runnable_share(const process_sched& before, const process_sched& after, const std::vector<pid_t>& tids,
                      bool others)
{
    process_sched b, a;
    for (const auto& [tid, x] : after.tasks)
        if ((std::find(tids.begin(), tids.end(), tid) != tids.end()) != others)
            a.tasks[tid] = x;
    b.tasks = before.tasks;
    b.at_ns = before.at_ns;
    a.at_ns = after.at_ns;
    auto d = delta(b, a);
    return static_cast<double>(d.cpu_ns + d.wait_ns) / static_cast<double>(d.wall_ns);
}

/// Acceptance 1's absolute expectations, beyond agreeing with /proc (the
/// caller's checks). K spinning threads are always runnable, under any load:
/// the test's own /proc measurement of them alone is ≈ K (±15 %; the fixture
/// did its job), and nrunnable ≈ K (±15 % of K) on top of what the other
/// tasks were runnable — the M sleepers wait for a CPU at each 10 ms wake-up,
/// next to nothing on an idle machine but up to 0.5 at a load of 7 on 2 CPUs,
/// which /proc measures per task in the same window. a_concurrency ≈ min(K,
/// CPUs) (±15 %) holds only while the CPUs are the target's: asserted when
/// /proc shows that for the same window (its a_concurrency within 10 % of
/// min(K, CPUs), leaving 5 % for the two windows' difference); otherwise only
/// the comparison with /proc holds, and the test says why.
void check_against_k(double nrunnable, double a_concurrency, int k, int cpus, double proc_spinners_nrunnable,
                     double proc_others_nrunnable, double proc_a_concurrency)
{
    const double ideal_a = std::min(k, cpus);
    INFO(fmt::format("K = {}, {} CPUs: tdctl nrunnable {:.4f}, a_concurrency {:.4f}; /proc nrunnable {:.4f} of the "
                     "spinners + {:.4f} of the other tasks, a_concurrency {:.4f}; machine load {}",
                     k, cpus, nrunnable, a_concurrency, proc_spinners_nrunnable, proc_others_nrunnable,
                     proc_a_concurrency, test::read_text_file("/proc/loadavg").value_or("?")));
    CHECK_MESSAGE(near(proc_spinners_nrunnable, k, 0.15),
                  "the fixture's K spinning threads were not runnable all along");
    CHECK(near(nrunnable - proc_others_nrunnable, k, 0.15));
    CHECK(nrunnable >= 0.85 * k);
    if (near(proc_a_concurrency, ideal_a, 0.10)) {
        CHECK(near(a_concurrency, ideal_a, 0.15));
    } else {
        MESSAGE(fmt::format("a_concurrency not compared with min(K, CPUs) = {}: /proc shows the target got {:.3f} "
                            "CPUs in the same window (the machine is loaded; load {}), so only the comparison with "
                            "/proc applies",
                            ideal_a, proc_a_concurrency, test::read_text_file("/proc/loadavg").value_or("?")));
    }
}

core::thread_stats get(core::session& s)
{
    auto st = s.accounting().get_stats();
    REQUIRE_MESSAGE(st.has_value(), "get_stats failed");
    return *st;
}

std::uint64_t process_cpu_ticks(pid_t pid)
{
    auto st = read_stat(pid, 0);
    REQUIRE_MESSAGE(st.has_value(), "cannot read /proc/", pid, "/stat");
    return st->utime + st->stime;
}

// ---------------------------------------------------------------- 1

TEST_CASE("busy K M: the averages are the CPU and run-queue time schedstat shows for the same window")
{
    test::require_ptrace();
    constexpr int k = 3, m = 4;
    busy_target busy(k, m);
    pid_t pid = busy.child.pid();
    auto s = attach(pid);
    REQUIRE(s->target().agent() != nullptr);

    std::uint64_t ticks0 = process_cpu_ticks(pid);
    auto before = read_process_sched(pid);
    REQUIRE(s->accounting().enable_stats(true).has_value());
    pump_for(*s, 2000ms);
    auto st = get(*s);
    auto after = read_process_sched(pid);
    std::uint64_t ticks1 = process_cpu_ticks(pid);

    auto d = delta(before, after);
    const double window = static_cast<double>(d.wall_ns) / ns_per_s;
    const double expect_a = static_cast<double>(d.cpu_ns) / static_cast<double>(d.wall_ns);
    const double expect_nr = static_cast<double>(d.cpu_ns + d.wait_ns) / static_cast<double>(d.wall_ns);
    const int cpus = cpus_of(pid);
    const auto& a = st.averages;
    INFO(describe(st));
    INFO(fmt::format("/proc in the same window ({:.3f} s, {} tasks): a_concurrency {:.4f}, nrunnable {:.4f}; {} CPUs",
                     window, after.tasks.size(), expect_a, expect_nr, cpus));

    CHECK(st.enabled);
    CHECK(st.td.nthreads == k + m + 1);
    CHECK(st.nthreads_source == "__nptl_nthreads");
    CHECK(after.tasks.size() == static_cast<std::size_t>(k + m + 1));
    CHECK(a.window_seconds >= 2.0);
    CHECK(a.window_seconds <= window);
    CHECK(near(a.nlwps.value(), k + m + 1, 0.03));
    // No more LWPs on a CPU than there are CPUs; schedstat's sum_exec_runtime
    // of a running task lags by at most a tick (≤ 10 ms) at each end.
    CHECK(a.a_concurrency.value() <= cpus + k * 0.02 / a.window_seconds);
    CHECK(near(a.a_concurrency.value(), expect_a, 0.15, 0.01));
    CHECK(near(a.nrunnable.value(), expect_nr, 0.15, 0.01));
    // The same CPU time from another source: the process's utime+stime
    // (ticks), which the kernel scales to its sum_exec_runtime.
    const double tick_ns = ns_per_s / static_cast<double>(ticks_per_second());
    const double stat_a = static_cast<double>(ticks1 - ticks0) * tick_ns / static_cast<double>(d.wall_ns);
    INFO(fmt::format("/proc/{}/stat in the same window: utime+stime +{} ticks, a_concurrency {:.4f}", pid,
                     ticks1 - ticks0, stat_a));
    CHECK(near(a.a_concurrency.value(), stat_a, 0.15, 2.0 * tick_ns / static_cast<double>(d.wall_ns)));
    check_relations(st);
    auto spinners = busy.spinners();
    REQUIRE(spinners.size() == k);
    check_against_k(a.nrunnable.value(), a.a_concurrency.value(), k, cpus,
                    runnable_share(before, after, spinners, false), runnable_share(before, after, spinners, true),
                    expect_a);
}

TEST_CASE("busy K M through tdctl --json: stats show agrees with /proc read around the run")
{
    test::require_ptrace();
    constexpr int k = 2, m = 3;
    busy_target busy(k, m);
    pid_t pid = busy.child.pid();

    auto before = read_process_sched(pid);
    auto run = run_tdctl_json(pid, evals({"stats enable", "sleep 2", "stats show"}));
    auto after = read_process_sched(pid);
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto recs = run.of_type("stats");
    REQUIRE(recs.size() == 1);
    const auto& r = recs[0];

    // The record carries every td_ta_stats_t field, the doubles and the 64-bit parts.
    for (const char* key : {"nthreads", "r_concurrency", "nrunnable_num", "nrunnable_den", "a_concurrency_num",
                            "a_concurrency_den", "nlwps_num", "nlwps_den", "nidle_num", "nidle_den"}) {
        INFO(key);
        REQUIRE(r.contains(key));
        CHECK(r[key].is_number_integer());
        CHECK(r[key].get<long long>() >= 0);
    }
    for (const char* key : {"nrunnable", "a_concurrency", "nlwps", "nidle", "window"}) {
        INFO(key);
        REQUIRE(r.contains(key));
        CHECK(r[key].is_number());
        CHECK(r[key].get<double>() >= 0);
    }
    CHECK(r.value("enabled", false));
    REQUIRE(r.contains("ns"));
    for (const char* key : {"nrunnable", "a_concurrency", "nlwps", "nidle"}) {
        INFO(key);
        REQUIRE(r["ns"].contains(key));
        REQUIRE(r["ns"][key].size() == 2);
    }
    auto ns = [&](const char* f, int i) { return r["ns"][f][i].get<std::uint64_t>(); };

    auto d = delta(before, after);
    // tdctl's window is a part of the test's (attach and detach are outside it):
    // compare rates.
    const double expect_a = static_cast<double>(d.cpu_ns) / static_cast<double>(d.wall_ns);
    const double expect_nr = static_cast<double>(d.cpu_ns + d.wait_ns) / static_cast<double>(d.wall_ns);
    INFO(fmt::format("/proc around the run ({:.3f} s): a_concurrency {:.4f}, nrunnable {:.4f}",
                     static_cast<double>(d.wall_ns) / ns_per_s, expect_a, expect_nr));
    CHECK(r["nthreads"] == k + m + 1);
    CHECK(r["window"].get<double>() >= 2.0 - json_rounding);
    CHECK(r["window"].get<double>() * ns_per_s <= static_cast<double>(d.wall_ns));
    CHECK(near(r["nlwps"].get<double>(), k + m + 1, 0.03));
    CHECK(r["a_concurrency"].get<double>() <= cpus_of(pid) + k * 0.02 / 2.0);
    CHECK(near(r["a_concurrency"].get<double>(), expect_a, 0.15, 0.01));
    CHECK(near(r["nrunnable"].get<double>(), expect_nr, 0.15, 0.01));
    auto spinners = busy.spinners();
    REQUIRE(spinners.size() == k);
    check_against_k(r["nrunnable"].get<double>(), r["a_concurrency"].get<double>(), k, cpus_of(pid),
                    runnable_share(before, after, spinners, false), runnable_share(before, after, spinners, true),
                    expect_a);
    // Relations, on the 64-bit parts exactly.
    CHECK(ns("nlwps", 1) == ns("nrunnable", 1));
    CHECK(ns("nlwps", 1) == ns("a_concurrency", 1));
    CHECK(ns("nlwps", 1) == ns("nidle", 1));
    CHECK(ns("a_concurrency", 0) <= ns("nrunnable", 0));
    CHECK(ns("nrunnable", 0) <= ns("nlwps", 0));
    CHECK(ns("nidle", 0) + ns("nrunnable", 0) == ns("nlwps", 0));
    // The doubles are the 64-bit ratios; the int fractions agree with them.
    for (const char* f : {"nrunnable", "a_concurrency", "nlwps", "nidle"}) {
        INFO(f);
        double exact = static_cast<double>(ns(f, 0)) / static_cast<double>(ns(f, 1));
        CHECK(r[f].get<double>() == doctest::Approx(exact).epsilon(1e-9));
        double num = r[std::string(f) + "_num"].get<double>(), den = r[std::string(f) + "_den"].get<double>();
        REQUIRE(den > 0);
        CHECK(num / den == doctest::Approx(exact).epsilon(1e-6));
    }
}

// ---------------------------------------------------------------- 2

void check_threads_inside_window(bool armed)
{
    stats_target target;
    pid_t pid = target.pid();
    auto s = attach(pid);
    if (armed)
        REQUIRE(s->arm({TD_CREATE, TD_DEATH}).has_value());
    const long hz = ticks_per_second();
    constexpr int k = 3;
    constexpr long burst_ms = 300;

    std::uint64_t ticks0 = process_cpu_ticks(pid);
    REQUIRE(s->accounting().enable_stats(true).has_value());
    std::string answer = target.ask_expect(fmt::format("burst {} {}", k, burst_ms), "burst ", s.get());
    pump_for(*s, 50ms);
    auto st = get(*s);
    std::uint64_t ticks1 = process_cpu_ticks(pid);

    const auto& a = st.averages;
    const double proc_ns = static_cast<double>(ticks1 - ticks0) * ns_per_s / static_cast<double>(hz);
    const double got_ns = static_cast<double>(a.a_concurrency.num);
    INFO(describe(st));
    INFO(fmt::format("burst answer '{}'; process utime+stime grew {} ticks = {:.0f} ns; a_concurrency_num {:.0f} ns",
                     answer, ticks1 - ticks0, proc_ns, got_ns));
    // The burst threads are gone: only main and the worker are left.
    CHECK(test::task_tids(pid).size() == 2);
    CHECK(st.td.nthreads == 2);
    // They did run (a busy machine still gives them some CPU).
    REQUIRE(ticks1 - ticks0 >= 5);
    // Their CPU time is in the numerator: the process's delta, within a few
    // ticks (the process total is truncated to ticks, and sampled around the
    // window) and 10 %.
    CHECK(near(got_ns, proc_ns, 0.10, 4.0 * ns_per_s / static_cast<double>(hz)));
    // Their lifetimes are in nlwps: main and the worker all along, plus each
    // burst thread for at least the burst.
    CHECK(a.nlwps.num >= 2 * a.nlwps.den + static_cast<std::uint64_t>(k * burst_ms * 1000000 * 0.9));
    CHECK(a.nlwps.num <= (2 + k) * a.nlwps.den);
    check_relations(st);
}

TEST_CASE("threads that live and die inside the window count in a_concurrency and nlwps")
{
    test::require_ptrace();
    SUBCASE("no events armed") { check_threads_inside_window(false); }
    SUBCASE("TD_CREATE and TD_DEATH armed") { check_threads_inside_window(true); }
}

// ---------------------------------------------------------------- 3

bool same_averages(const core::stat_averages& x, const core::stat_averages& y)
{
    auto eq = [](const core::stat_fraction& a, const core::stat_fraction& b) { return a.num == b.num && a.den == b.den; };
    return eq(x.nrunnable, y.nrunnable) && eq(x.a_concurrency, y.a_concurrency) && eq(x.nlwps, y.nlwps) &&
           eq(x.nidle, y.nidle) && x.window_seconds == y.window_seconds;
}

TEST_CASE("disable freezes the averages while nthreads stays live; enable resets; reset zeroes")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    auto s = attach(pid);

    // Disabled by default: nothing gathered.
    auto st0 = get(*s);
    CHECK_FALSE(st0.enabled);
    CHECK(st0.averages.nlwps.den == 0);
    CHECK(st0.td.nthreads == 2);

    REQUIRE(s->accounting().enable_stats(true).has_value());
    target.ask_expect("spin 300", "spun", s.get());
    pump_for(*s, 200ms);
    auto on = get(*s);
    REQUIRE(s->accounting().enable_stats(false).has_value());
    auto frozen = get(*s);
    INFO("while on: ", describe(on));
    INFO("frozen: ", describe(frozen));
    CHECK(on.enabled);
    CHECK_FALSE(frozen.enabled);
    // Disabling does not reset: the window is the one gathered so far.
    CHECK(frozen.averages.window_seconds >= on.averages.window_seconds);
    CHECK(frozen.averages.window_seconds >= 0.49);   // a 300 ms spin (ms clock) and 200 ms
    CHECK(frozen.averages.a_concurrency.num >= on.averages.a_concurrency.num);
    CHECK(frozen.averages.a_concurrency.num > 20000000);  // the 300 ms spin got some CPU, even on a busy machine
    check_relations(frozen);

    // Threads come and CPU is used while disabled: the averages do not move,
    // nthreads does.
    CHECK(target.ask_expect("park 3", "parked ", s.get()) == "parked 3");
    target.ask_expect("spin 200", "spun", s.get());
    pump_for(*s, 500ms);
    auto later = get(*s);
    INFO("a while later, disabled: ", describe(later));
    CHECK(same_averages(frozen.averages, later.averages));
    CHECK(later.td.nrunnable_num == frozen.td.nrunnable_num);
    CHECK(later.td.nrunnable_den == frozen.td.nrunnable_den);
    CHECK(later.td.a_concurrency_num == frozen.td.a_concurrency_num);
    CHECK(later.td.a_concurrency_den == frozen.td.a_concurrency_den);
    CHECK(later.td.nlwps_num == frozen.td.nlwps_num);
    CHECK(later.td.nlwps_den == frozen.td.nlwps_den);
    CHECK(later.td.nidle_num == frozen.td.nidle_num);
    CHECK(later.td.nidle_den == frozen.td.nidle_den);
    CHECK(later.td.nthreads == frozen.td.nthreads + 3);
    CHECK(later.td.nthreads == static_cast<int>(test::task_tids(pid).size()));
    // Disabling twice changes nothing either.
    REQUIRE(s->accounting().enable_stats(false).has_value());
    CHECK(same_averages(frozen.averages, get(*s).averages));

    // Enabling resets: a new window that starts now.
    REQUIRE(s->accounting().enable_stats(true).has_value());
    auto fresh = get(*s);
    INFO("just enabled: ", describe(fresh));
    CHECK(fresh.enabled);
    CHECK(fresh.averages.window_seconds < 0.2);
    CHECK(fresh.averages.a_concurrency.num <= static_cast<std::uint64_t>(cpus_of(pid)) * fresh.averages.nlwps.den +
                                                  20000000);
    pump_for(*s, 300ms);
    auto grown = get(*s);
    INFO("300 ms later: ", describe(grown));
    CHECK(grown.averages.window_seconds >= 0.3);
    CHECK(near(grown.averages.nlwps.value(), 5.0, 0.03));  // main, worker, 3 parked
    check_relations(grown);

    // reset while gathering: the window starts again.
    REQUIRE(s->accounting().reset_stats().has_value());
    auto reset_on = get(*s);
    INFO("reset while on: ", describe(reset_on));
    CHECK(reset_on.enabled);
    CHECK(reset_on.averages.window_seconds < 0.2);
    CHECK(reset_on.averages.window_seconds < grown.averages.window_seconds);
    CHECK(reset_on.averages.nlwps.num <= 5 * reset_on.averages.nlwps.den + 5);

    // reset while disabled: all counters zero (seed: "resets all counters ... to zero").
    pump_for(*s, 200ms);
    REQUIRE(s->accounting().enable_stats(false).has_value());
    REQUIRE(s->accounting().reset_stats().has_value());
    auto zero = get(*s);
    INFO("reset while off: ", describe(zero));
    CHECK_FALSE(zero.enabled);
    CHECK(zero.averages.window_seconds == 0.0);
    for (const auto* f : {&zero.averages.nrunnable, &zero.averages.a_concurrency, &zero.averages.nlwps,
                          &zero.averages.nidle}) {
        CHECK(f->num == 0);
        CHECK(f->den == 0);
    }
    CHECK(zero.td.nlwps_num == 0);
    CHECK(zero.td.nrunnable_num == 0);
    CHECK(zero.td.a_concurrency_num == 0);
    CHECK(zero.td.nidle_num == 0);
    CHECK(zero.td.nthreads == 5);
    target.ask_expect("unpark", "unparked 3", s.get());
    CHECK(get(*s).td.nthreads == 2);
}

TEST_CASE("pthread_setconcurrency(7) in the target shows as r_concurrency 7, live while disabled")
{
    test::require_ptrace();
    stats_target target;
    auto s = attach(target.pid());
    auto st = get(*s);
    // scripts/setup-debian.sh installs libc6-dbg wherever the suite runs: not
    // finding the symbol is a failure, not a reason to skip.
    REQUIRE_MESSAGE(!st.r_concurrency_source.empty(),
                    "glibc's __concurrency_level was not found, so r_concurrency cannot be read: it is in the .symtab "
                    "of libc's separate debug file from libc6-dbg (installed by scripts/setup-debian.sh); is "
                    "libc6-dbg installed and matching the libc6 version?");
    CHECK(st.r_concurrency_source == "__concurrency_level");
    CHECK(st.td.r_concurrency == 0);
    CHECK(target.ask_expect("setconcurrency 7", "concurrency ", s.get()) == "concurrency 7");
    CHECK(get(*s).td.r_concurrency == 7);
    REQUIRE(s->accounting().enable_stats(true).has_value());
    CHECK(get(*s).td.r_concurrency == 7);
    REQUIRE(s->accounting().enable_stats(false).has_value());
    CHECK(target.ask_expect("setconcurrency 3", "concurrency ", s.get()) == "concurrency 3");
    CHECK(get(*s).td.r_concurrency == 3);

    // And through the CLI's record.
    s.reset();
    auto run = run_tdctl_json(target.pid(), evals({"stats show"}));
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto recs = run.of_type("stats");
    REQUIRE(recs.size() == 1);
    CHECK(recs[0]["r_concurrency"] == 3);
    CHECK(recs[0]["r_concurrency_source"] == "__concurrency_level");
}

TEST_CASE("stats enable / disable / reset through tdctl: frozen records, fresh windows")
{
    test::require_ptrace();
    busy_target busy(1, 2);
    auto run = run_tdctl_json(busy.child.pid(),
                              evals({"stats show", "stats enable", "sleep 0.5", "stats disable", "stats show",
                                     "sleep 0.5", "stats show", "stats enable", "stats show", "sleep 0.3",
                                     "stats reset", "stats show", "stats disable", "stats reset", "stats show"}));
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto recs = run.of_type("stats");
    REQUIRE(recs.size() == 6);
    auto states = run.of_type("stats_state");
    REQUIRE(states.size() == 6);
    CHECK(states[0]["enabled"] == true);
    CHECK(states[1]["enabled"] == false);
    CHECK(states[3].value("reset", false));

    // 0: never enabled.
    CHECK(recs[0]["enabled"] == false);
    CHECK(recs[0]["window"] == 0.0);
    // 1, 2: frozen, identical averages half a second apart.
    CHECK(recs[1]["enabled"] == false);
    CHECK(recs[1]["window"].get<double>() >= 0.5 - json_rounding);
    for (const char* key : {"nrunnable_num", "nrunnable_den", "a_concurrency_num", "a_concurrency_den", "nlwps_num",
                            "nlwps_den", "nidle_num", "nidle_den", "nrunnable", "a_concurrency", "nlwps", "nidle",
                            "window", "ns"}) {
        INFO(key);
        CHECK(recs[1][key] == recs[2][key]);
    }
    CHECK(recs[2]["time"].get<double>() - recs[1]["time"].get<double>() >= 0.5 - json_rounding);
    CHECK(near(recs[1]["nlwps"].get<double>(), 4.0, 0.03));
    CHECK(recs[1]["nthreads"] == 4);
    CHECK(recs[2]["nthreads"] == 4);
    // 3: just enabled: a new window.
    CHECK(recs[3]["enabled"] == true);
    CHECK(recs[3]["window"].get<double>() < 0.2);
    // 4: reset while on: a new window again, shorter than the 0.3 s before it.
    CHECK(recs[4]["enabled"] == true);
    CHECK(recs[4]["window"].get<double>() < 0.2);
    // 5: reset while off: zeros.
    CHECK(recs[5]["enabled"] == false);
    CHECK(recs[5]["window"] == 0.0);
    CHECK(recs[5]["nlwps_num"] == 0);
    CHECK(recs[5]["a_concurrency_num"] == 0);
    CHECK(recs[5]["nrunnable_num"] == 0);
}

TEST_CASE("stats watch prints one interval row per period")
{
    test::require_ptrace();
    busy_target busy(1, 2);
    auto run = run_tdctl_json(busy.child.pid(), evals({"stats watch --interval 0.4 --count 3", "stats show"}));
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto recs = run.of_type("stats");
    REQUIRE(recs.size() == 4);
    for (int i = 0; i < 3; ++i) {
        INFO("row ", i, ": ", recs[i].dump());
        double w = recs[i]["window"].get<double>();
        CHECK(w >= 0.4 - json_rounding);
        CHECK(w < 0.8);
        CHECK(near(recs[i]["nlwps"].get<double>(), 4.0, 0.03));
        CHECK(recs[i]["a_concurrency"].get<double>() <= recs[i]["nrunnable"].get<double>() + 1e-9);
        CHECK(recs[i]["nrunnable"].get<double>() <= recs[i]["nlwps"].get<double>() + 1e-9);
        CHECK(recs[i]["nthreads"] == 4);
    }
    // watch turned gathering on only for itself.
    CHECK(recs[3]["enabled"] == false);
}

TEST_CASE("the averages go on across an exec by the main thread")
{
    test::require_ptrace();
    // (An exec by another thread: stats_regression_tests.cpp.)
    check_stats_across_exec("exec-main");
}

// (A target without a thread library: stats_nolib_tests.cpp.)

}  // namespace
}  // namespace tdctl::stats_test
