// `top` beside `pidstat -t -p PID` (sysstat) on the same target over the
// same window (issue 12): each thread's %usr+%sys agree within 10 % of one
// another. Apart from stats_top_tests so that a machine without pidstat
// skips this one alone (scripts/setup-debian.sh installs sysstat).
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

/// One thread's line of pidstat -t: %usr + %system, percent of one CPU.
using pidstat_cpu = std::map<pid_t, double>;

/// The thread rows of pidstat -t's last table ("Average:" with one
/// interval): the columns are found by the header's names.
pidstat_cpu parse_pidstat(const std::string& text)
{
    pidstat_cpu rows;
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
        if (column.empty() || !column.contains("%system") || w.size() <= column["%system"])
            continue;
        const std::string& tid = w[column["TID"]];
        if (tid.empty() || tid.find_first_not_of("0123456789") != std::string::npos)
            continue;   // the process line ("-") or not a row
        rows[std::stoi(tid)] = std::stod(w[column["%usr"]]) + std::stod(w[column["%system"]]);
    }
    return rows;
}

TEST_CASE("top and pidstat -t agree per thread within 10 % on K spinning and M sleeping threads")
{
    auto pidstat = find_on_path("pidstat");
    if (!pidstat)
        test::skip_test("pidstat (sysstat) is not installed; scripts/setup-debian.sh installs it");
    test::require_ptrace();
    constexpr int k = 2, m = 2;
    test::temp_file record("tdctl-pidstat-busy");
    auto busy = child_process::spawn({test::fixture_path("busy"), "--record", record.path(), "--nap", "1000",
                                      std::to_string(k), std::to_string(m), "0"});
    test::wait_for_fact(record.path(), "done", 1, 10s);
    const pid_t pid = busy.pid();
    const auto facts = test::read_record(record.path());
    std::vector<pid_t> spinners = test::thread_tids(facts, "spin"), sleepers = test::thread_tids(facts, "sleep");
    REQUIRE(spinners.size() == k);
    REQUIRE(sleepers.size() == m);

    // Both started together: tdctl's window opens right after its attach.
    test::spawn_options c_locale;
    c_locale.env = {{"LC_ALL", "C"}, {"S_TIME_FORMAT", "ISO"}};
    auto ps = child_process::spawn({*pidstat, "-t", "-p", std::to_string(pid), "2", "1"}, c_locale);
    auto top = test::run_command({test::tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                  "top --interval 2 --count 1"},
                                 30s);
    INFO(top.describe());
    REQUIRE(ps.require_exit(30s).is_success());
    const std::string ps_text = ps.stdout_text();
    INFO("pidstat:\n", ps_text);
    REQUIRE(top.status.is_success());

    std::map<pid_t, double> tdctl_cpu;
    for (const auto& r : test::json_lines(top.out))
        if (r.value("type", "") == "top")
            tdctl_cpu[r.at("tid").get<pid_t>()] = r.at("usr").get<double>() + r.at("sys").get<double>();
    const auto ps_cpu = parse_pidstat(ps_text);
    // pidstat reads clock ticks: one tick at each end of a 2 s window, in percent.
    const double tick_pct = 2 * 100.0 / static_cast<double>(ticks_per_second()) / 2.0;
    std::vector<pid_t> all = spinners;
    all.insert(all.end(), sleepers.begin(), sleepers.end());
    for (pid_t t : all) {
        REQUIRE_MESSAGE(tdctl_cpu.contains(t), "no top row for ", t);
        REQUIRE_MESSAGE(ps_cpu.contains(t), "no pidstat row for ", t);
        INFO("tid ", t, ": top ", tdctl_cpu[t], "%, pidstat ", ps_cpu.at(t), "%");
        CHECK(std::abs(tdctl_cpu[t] - ps_cpu.at(t)) <= 0.10 * std::max(tdctl_cpu[t], ps_cpu.at(t)) + tick_pct);
    }
    // Not a comparison that cannot fail: the spinners ran, the sleepers hardly.
    for (pid_t t : spinners)
        CHECK(ps_cpu.at(t) > 5.0);
    for (pid_t t : sleepers)
        CHECK(ps_cpu.at(t) < 5.0);
}

}  // namespace
}  // namespace tdctl::stats_test
