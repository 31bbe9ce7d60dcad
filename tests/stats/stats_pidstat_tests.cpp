// `top` beside `pidstat -t -p PID` (sysstat) on the same target over the
// same window (issue 12): each thread's %usr+%sys agree within 10 % of one
// another, and so does the process line's with pidstat's TGID line. Apart
// from stats_top_tests so that a machine without pidstat skips this one
// alone (scripts/setup-debian.sh installs sysstat).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/stats/stats_support.hpp"

namespace tdctl::stats_test {
namespace {

using test::child_process;

/// A program on PATH, or nullopt.
std::optional<std::string> find_on_path(const std::string& name)
{
    const char* path = std::getenv("PATH");
    std::istringstream dirs(path ? path : "/usr/bin:/bin");
    for (std::string dir; std::getline(dirs, dir, ':');)
        if (std::string candidate = dir + "/" + name; ::access(candidate.c_str(), X_OK) == 0)
            return candidate;
    return std::nullopt;
}

/// One line of pidstat -t, in percent of one CPU over the interval.
struct pidstat_row {
    double cpu = 0;    ///< %usr + %system
    double wait = 0;   ///< %wait (schedstat's run-queue wait)
};

/// pidstat -t's last table ("Average:" with one interval).
struct pidstat_table {
    std::map<pid_t, pidstat_row> threads;   ///< by TID
    std::optional<pidstat_row> process;     ///< the TGID line (TID "-")
};

/// The rows of pidstat -t's last table: the columns are found by the
/// header's names.
pidstat_table parse_pidstat(const std::string& text)
{
    pidstat_table table;
    std::map<std::string, std::size_t> column;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        std::istringstream words(line);
        std::vector<std::string> w;
        for (std::string word; words >> word;)
            w.push_back(word);
        if (std::find(w.begin(), w.end(), "TID") != w.end() && std::find(w.begin(), w.end(), "%usr") != w.end()) {
            column.clear();
            for (std::size_t i = 0; i < w.size(); ++i)
                column[w[i]] = i;
            continue;
        }
        if (column.empty() || !column.contains("%wait") || w.size() <= column["%wait"])
            continue;
        const pidstat_row row{std::stod(w[column["%usr"]]) + std::stod(w[column["%system"]]),
                              std::stod(w[column["%wait"]])};
        const std::string& tid = w[column["TID"]];
        if (tid == "-")
            table.process = row;
        else if (!tid.empty() && tid.find_first_not_of("0123456789") == std::string::npos)
            table.threads[std::stoi(tid)] = row;
    }
    return table;
}

/// The busy fixture with K spinning and M sleeping threads (1 s naps).
struct busy_fixture {
    test::temp_file record{"tdctl-pidstat-busy"};
    child_process process;
    std::vector<pid_t> spinners, sleepers;

    busy_fixture(int k, int m)
        : process(child_process::spawn({test::fixture_path("busy"), "--record", record.path(), "--nap", "1000",
                                        std::to_string(k), std::to_string(m), "0"}))
    {
        test::wait_for_fact(record.path(), "done", 1, 10s);
        const auto facts = test::read_record(record.path());
        spinners = test::thread_tids(facts, "spin");
        sleepers = test::thread_tids(facts, "sleep");
    }
};

/// `top --interval 2 --count 1` and `pidstat -t -p PID 2 1`, started
/// together on `pid`.
struct side_by_side {
    std::vector<json> records;   ///< tdctl's
    std::string tdctl_text;      ///< tdctl's run, described
    pidstat_table table;
    std::string pidstat_text;
};

side_by_side top_beside_pidstat(const std::string& pidstat, pid_t pid)
{
    // Both started together: tdctl's window opens right after its attach.
    test::spawn_options c_locale;
    c_locale.env = {{"LC_ALL", "C"}, {"S_TIME_FORMAT", "ISO"}};
    auto ps = child_process::spawn({pidstat, "-t", "-p", std::to_string(pid), "2", "1"}, c_locale);
    auto top = test::run_command({test::tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                  "top --interval 2 --count 1"},
                                 30s);
    side_by_side run{test::json_lines(top.out), top.describe(), {}, {}};
    INFO(run.tdctl_text);
    REQUIRE(ps.require_exit(30s).is_success());
    run.pidstat_text = ps.stdout_text();
    INFO("pidstat:\n", run.pidstat_text);
    REQUIRE(top.status.is_success());
    run.table = parse_pidstat(run.pidstat_text);
    return run;
}

/// pidstat reads clock ticks: one tick at each end of a 2 s window, in percent.
double tick_percent() { return 2 * 100.0 / static_cast<double>(ticks_per_second()) / 2.0; }

/// Within 10 % of the larger, or a tick at each end.
bool agree(double a, double b) { return std::abs(a - b) <= 0.10 * std::max(a, b) + tick_percent(); }

std::optional<std::string> pidstat_or_skip()
{
    auto pidstat = find_on_path("pidstat");
    if (!pidstat)
        test::skip_test("pidstat (sysstat) is not installed; scripts/setup-debian.sh installs it");
    test::require_ptrace();
    return pidstat;
}

TEST_CASE("top and pidstat -t agree per thread within 10 % on K spinning and M sleeping threads")
{
    const auto pidstat = pidstat_or_skip();
    constexpr int k = 2, m = 2;
    busy_fixture busy(k, m);
    REQUIRE(busy.spinners.size() == k);
    REQUIRE(busy.sleepers.size() == m);
    const auto run = top_beside_pidstat(*pidstat, busy.process.pid());
    INFO(run.tdctl_text);
    INFO("pidstat:\n", run.pidstat_text);

    std::map<pid_t, double> tdctl_cpu;
    for (const auto& r : run.records)
        if (r.value("type", "") == "top")
            tdctl_cpu[r.at("tid").get<pid_t>()] = r.at("usr").get<double>() + r.at("sys").get<double>();
    std::vector<pid_t> all = busy.spinners;
    all.insert(all.end(), busy.sleepers.begin(), busy.sleepers.end());
    for (pid_t t : all) {
        REQUIRE_MESSAGE(tdctl_cpu.contains(t), "no top row for ", t);
        REQUIRE_MESSAGE(run.table.threads.contains(t), "no pidstat row for ", t);
        const double ps_cpu = run.table.threads.at(t).cpu;
        INFO("tid ", t, ": top ", tdctl_cpu[t], "%, pidstat ", ps_cpu, "%");
        CHECK(agree(tdctl_cpu[t], ps_cpu));
    }
    // Not a comparison that cannot fail: the spinners ran, the sleepers hardly.
    for (pid_t t : busy.spinners)
        CHECK(run.table.threads.at(t).cpu > 5.0);
    for (pid_t t : busy.sleepers)
        CHECK(run.table.threads.at(t).cpu < 5.0);
}

// The process line summed every thread's %wait and %off (a process of six
// blocked threads was "600 % off CPU"). pidstat's TGID line is the process
// as one process: its CPU time in percent of one CPU. Its %wait is the main
// thread's alone (/proc/PID/schedstat is the leader's), so tdctl's %wait and
// %off are shares of the threads' time instead, checked against pidstat's
// own thread lines.
TEST_CASE("top's process line and pidstat -t's TGID line agree on the process's CPU; %wait and %off are shares")
{
    const auto pidstat = pidstat_or_skip();
    constexpr int k = 2, m = 3;
    busy_fixture busy(k, m);
    REQUIRE(busy.spinners.size() == k);
    REQUIRE(busy.sleepers.size() == m);
    const auto run = top_beside_pidstat(*pidstat, busy.process.pid());
    INFO(run.tdctl_text);
    INFO("pidstat:\n", run.pidstat_text);
    REQUIRE(run.table.process.has_value());

    std::optional<json> process;
    for (const auto& r : run.records)
        if (r.value("type", "") == "top_process")
            process = r;
    REQUIRE(process.has_value());
    INFO("top_process: ", process->dump());
    const double cpu = process->at("usr").get<double>() + process->at("sys").get<double>();
    CHECK(agree(cpu, run.table.process->cpu));
    // Two spinners: the process used two CPUs' worth, or what the machine gave them.
    CHECK(run.table.process->cpu > 5.0);

    // pidstat's threads: each one's time off CPU and not waiting for one is
    // what is left of the interval; the process's share is their mean.
    const std::size_t threads = process->at("threads").get<std::size_t>();
    REQUIRE(threads == run.table.threads.size());
    double ps_wait = 0, ps_off = 0;
    for (const auto& [tid, row] : run.table.threads) {
        ps_wait += row.wait;
        ps_off += std::max(0.0, 100.0 - row.cpu - row.wait);
    }
    ps_wait /= static_cast<double>(threads);
    ps_off /= static_cast<double>(threads);
    const double wait_share = process->at("wait_share").get<double>();
    const double off_share = process->at("off_share").get<double>();
    INFO("pidstat's threads: wait ", ps_wait, "%, off ", ps_off, "%");
    CHECK(off_share <= 100.0);
    CHECK(wait_share <= 100.0);
    // A run-queue wait is charged when it ends: a few points at each end.
    CHECK(std::abs(off_share - ps_off) <= 10.0);
    CHECK(std::abs(wait_share - ps_wait) <= 10.0);
    // The sleepers and the main thread are off CPU: 4 of the 6 threads.
    CHECK(off_share > 50.0);
    const double interval = process->at("interval").get<double>();
    const double thread_seconds = process->at("thread_seconds").get<double>();
    CHECK(thread_seconds == doctest::Approx(static_cast<double>(threads) * interval).epsilon(0.01));
}

}  // namespace
}  // namespace tdctl::stats_test
