// `top` and the on-CPU / run-queue / off-CPU split at the end of `sleep` and
// `watch` (issue 12): tdctl's numbers against the kernel's, read by the test
// from /proc over the same window. The test opens and closes its window when
// tdctl's output for an interval arrives (or just before it sends the
// command), so both windows cover the same time to within a pipe's latency.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/stats/stats_support.hpp"

namespace tdctl::stats_test {
namespace {

using test::child_process;

/// `busy --nap 1000 K M 0 CROWD` with a record file, running once all its
/// threads are up. Its sleepers wake once a second: even on a loaded host
/// they are hardly ever runnable.
struct busy_target {
    test::temp_file record{"tdctl-top-busy"};
    child_process child;
    busy_target(int k, int m, int crowd)
        : child(child_process::spawn({test::fixture_path("busy"), "--record", record.path(), "--nap", "1000",
                                      std::to_string(k), std::to_string(m), "0", std::to_string(crowd)}))
    {
        test::wait_for_fact(record.path(), "done", 1, 10s);
    }
    pid_t pid() const { return child.pid(); }
    std::vector<pid_t> tids(const char* label) { return test::thread_tids(test::read_record(record.path()), label); }
};

/// tdctl --json attached to a target, read record by record as it writes them.
struct live_tdctl {
    child_process child;
    std::vector<json> seen;

    explicit live_tdctl(pid_t pid, const std::vector<std::string>& args)
        : child(child_process::spawn(argv(pid, args)))
    {
    }
    static std::vector<std::string> argv(pid_t pid, const std::vector<std::string>& args)
    {
        std::vector<std::string> v{test::tdctl_path(), "--json", "-p", std::to_string(pid)};
        v.insert(v.end(), args.begin(), args.end());
        return v;
    }
    /// The next record; throws (naming tdctl and its stderr) after 30 s.
    json next()
    {
        seen.push_back(json::parse(child.require_line(30s)));
        return seen.back();
    }
    json next_of_type(std::string_view type)
    {
        for (;;)
            if (auto r = next(); r.value("type", "") == type)
                return r;
    }
    /// The records of `type` that come next, up to the first of another type.
    std::vector<json> run_of(std::string_view type)
    {
        std::vector<json> run;
        for (json r = next(); r.value("type", "") == type; r = next())
            run.push_back(r);
        return run;
    }
    /// The last record read is `detached`, and tdctl exits 0.
    void require_clean_end()
    {
        INFO("tdctl:\n", describe());
        REQUIRE(seen.back().value("type", "") == "detached");
        REQUIRE(child.require_exit(20s).is_success());
    }
    std::string describe()
    {
        std::string s;
        for (const auto& r : seen)
            s += r.dump() + "\n";
        return s + "stderr: " + child.stderr_text();
    }
};

/// What the kernel says of one task at one moment.
struct task_reading {
    std::uint64_t ticks = 0;    ///< stat utime + stime
    std::uint64_t cpu_ns = 0;   ///< schedstat
    std::uint64_t wait_ns = 0;  ///< schedstat
    std::uint64_t nvcsw = 0;    ///< status voluntary_ctxt_switches
};

struct proc_reading {
    std::map<pid_t, task_reading> tasks;
    std::uint64_t process_ticks = 0;   ///< /proc/PID/stat utime + stime (exited threads included)
    std::uint64_t at_ns = 0;
};

proc_reading read_now(pid_t pid, const std::vector<pid_t>& tids)
{
    proc_reading r;
    for (pid_t t : tids) {
        auto st = read_stat(pid, t);
        auto ss = read_sched(pid, t);
        auto status = read_status_numbers(pid, t);
        REQUIRE_MESSAGE((st && ss && status), "cannot read /proc/", pid, "/task/", t);
        r.tasks[t] = {st->utime + st->stime, ss->cpu_ns, ss->wait_ns, status->at("voluntary_ctxt_switches")};
    }
    auto whole = read_stat(pid, 0);
    REQUIRE(whole.has_value());
    r.process_ticks = whole->utime + whole->stime;
    r.at_ns = monotonic_ns();
    return r;
}

double seconds_between(const proc_reading& a, const proc_reading& b)
{
    return static_cast<double>(b.at_ns - a.at_ns) / 1e9;
}

/// `got` is within 10 % of `expected`, plus `slack` (the resolution of what
/// the kernel shows, in the same unit).
bool within_10_percent(double got, double expected, double slack)
{
    return std::abs(got - expected) <= 0.10 * std::abs(expected) + slack;
}

std::map<pid_t, json> rows_by_tid(const std::vector<json>& rows)
{
    std::map<pid_t, json> out;
    for (const auto& r : rows)
        out[r.at("tid").get<pid_t>()] = r;
    return out;
}

TEST_CASE("top --interval 1 --count 2 on K spinning and M sleeping threads: %usr+%sys are their stat tick deltas, "
          "sleepers are off CPU")
{
    test::require_ptrace();
    constexpr int k = 2, m = 2;
    busy_target busy(k, m, 0);
    const pid_t pid = busy.pid();
    const auto spinners = busy.tids("spin"), sleepers = busy.tids("sleep");
    REQUIRE(spinners.size() == k);
    REQUIRE(sleepers.size() == m);
    std::vector<pid_t> all = spinners;
    all.insert(all.end(), sleepers.begin(), sleepers.end());

    live_tdctl tdctl(pid, {"-e", "top --interval 1 --count 2"});
    REQUIRE(tdctl.next().value("type", "") == "attached");
    // The first interval's output opens the test's window, the second's closes it.
    tdctl.next_of_type("top_process");
    const auto before = read_now(pid, all);
    const json process = tdctl.next_of_type("top_process");
    const auto after = read_now(pid, all);
    const std::vector<json> rows = tdctl.run_of("top");
    tdctl.require_clean_end();
    INFO("tdctl:\n", tdctl.describe());

    const double wall = seconds_between(before, after);
    const double hz = static_cast<double>(ticks_per_second());
    // One clock tick of stat's resolution at each end, in percent of the window.
    const double tick_pct = 2 * 100.0 / hz / wall;
    auto rows_of = rows_by_tid(rows);
    REQUIRE(rows.size() == k + m + 1);   // and main
    for (const auto& r : rows) {
        for (const char* key : {"pid", "tid", "name", "usr", "sys", "wait", "off", "cswch_per_s", "nvcswch_per_s",
                                "minflt_per_s", "majflt_per_s", "interval", "time"})
            CHECK_MESSAGE(r.contains(key), "no ", key, " in ", r.dump());
        CHECK(r["pid"] == pid);
        CHECK(r["interval"].get<double>() >= 1.0);
    }
    for (pid_t t : all) {
        REQUIRE(rows_of.contains(t));
        const json& r = rows_of[t];
        const auto& b = before.tasks.at(t);
        const auto& a = after.tasks.at(t);
        const double proc_cpu = 100.0 * static_cast<double>(a.ticks - b.ticks) / hz / wall;
        const double proc_wait = 100.0 * static_cast<double>(a.wait_ns - b.wait_ns) / 1e9 / wall;
        const double proc_cswch = static_cast<double>(a.nvcsw - b.nvcsw) / wall;
        const double cpu = r["usr"].get<double>() + r["sys"].get<double>();
        INFO("tid ", t, ": top ", r.dump(), "; /proc over ", wall, " s: cpu ", proc_cpu, "%, wait ", proc_wait,
             "%, cswch/s ", proc_cswch);
        CHECK(within_10_percent(cpu, proc_cpu, tick_pct));
        // A run-queue wait is charged when it ends: a few ms at each end.
        CHECK(within_10_percent(r["wait"].get<double>(), proc_wait, 1.0));
        CHECK(within_10_percent(r["cswch_per_s"].get<double>(), proc_cswch, 2.0 / wall));
        CHECK(r["born"] == false);
        CHECK(r["ended"] == false);
    }
    for (pid_t t : spinners) {
        INFO("spinner ", t, ": ", rows_of[t].dump());
        // Not a comparison that cannot fail: a spinner got some CPU.
        CHECK(rows_of[t]["usr"].get<double>() + rows_of[t]["sys"].get<double>() > 5.0);
        CHECK(rows_of[t]["off"].get<double>() < 10.0);
    }
    for (pid_t t : sleepers) {
        INFO("sleeper ", t, ": ", rows_of[t].dump());
        CHECK(rows_of[t]["usr"].get<double>() + rows_of[t]["sys"].get<double>() < 5.0);
        CHECK(rows_of[t]["off"].get<double>() > 90.0);
    }
    // The process line is the process's: its CPU every thread's summed, its
    // %wait and %off shares of the threads' time (every thread lived through
    // the interval: the rows' mean), never 300 % off CPU for three sleepers.
    INFO("process ", process.dump());
    CHECK(process["threads"] == k + m + 1);
    CHECK(process["born"] == 0);
    CHECK(process["ended"] == 0);
    const double proc_total = 100.0 * static_cast<double>(after.process_ticks - before.process_ticks) / hz / wall;
    CHECK(within_10_percent(process["usr"].get<double>() + process["sys"].get<double>(), proc_total, tick_pct));
    double rows_wait = 0, rows_off = 0;
    for (const auto& r : rows) {
        rows_wait += r["wait"].get<double>();
        rows_off += r["off"].get<double>();
    }
    const auto n = static_cast<double>(rows.size());
    CHECK(process["wait_share"].get<double>() == doctest::Approx(rows_wait / n).epsilon(1e-3));
    CHECK(process["off_share"].get<double>() == doctest::Approx(rows_off / n).epsilon(1e-3));
    CHECK(process["off_share"].get<double>() <= 100.0);
    const double interval = process["interval"].get<double>();
    CHECK(process["thread_seconds"].get<double>() == doctest::Approx(n * interval).epsilon(1e-3));
}

TEST_CASE("top counts threads born and ended inside the interval: their CPU is what left the process's total")
{
    test::require_ptrace();
    stats_target target;
    const pid_t pid = target.pid();
    const std::vector<pid_t> live = test::task_tids(pid);

    live_tdctl tdctl(pid, {"-e", "top --interval 4 --count 1"});
    REQUIRE(tdctl.next().value("type", "") == "attached");
    // `top` opens its window right after the attach; the burst must fall inside it.
    std::this_thread::sleep_for(300ms);
    const auto before = read_now(pid, live);
    std::string answer = target.ask_expect("burst 2 1000", "burst ", nullptr);
    const auto after = read_now(pid, live);
    std::set<pid_t> burst;
    {
        std::istringstream in(answer.substr(6));
        for (pid_t t; in >> t;)
            burst.insert(t);
    }
    REQUIRE(burst.size() == 2);
    const json process = tdctl.next_of_type("top_process");
    const std::vector<json> rows = tdctl.run_of("top");
    tdctl.require_clean_end();
    INFO("tdctl:\n", tdctl.describe());

    // The CPU the burst threads used: the process's growth minus that of the
    // threads that stayed (the kernel folds an exiting thread's time into its process).
    const double hz = static_cast<double>(ticks_per_second());
    double stayed_ticks = 0;
    for (pid_t t : live)
        stayed_ticks += static_cast<double>(after.tasks.at(t).ticks - before.tasks.at(t).ticks);
    const double dead_cpu = (static_cast<double>(after.process_ticks - before.process_ticks) - stayed_ticks) / hz;
    double seen_cpu = 0;
    std::size_t found = 0;
    for (const auto& r : rows) {
        if (!burst.contains(r["tid"].get<pid_t>()))
            continue;
        ++found;
        CHECK(r["born"] == true);
        CHECK(r["ended"] == true);
        seen_cpu += (r["usr"].get<double>() + r["sys"].get<double>()) / 100.0 * r["interval"].get<double>();
    }
    INFO("burst CPU from /proc ", dead_cpu, " s, from top ", seen_cpu, " s");
    REQUIRE(found == 2);
    REQUIRE(dead_cpu > 0.1);   // the threads did run
    // Each reading rounds down to a tick: the process, and each thread that stayed.
    CHECK(within_10_percent(seen_cpu, dead_cpu, static_cast<double>(live.size() + 1) / hz));
    CHECK(process["born"].get<int>() >= 2);
    CHECK(process["ended"].get<int>() >= 2);
}

TEST_CASE("sleep's time split tells a spinner, a sleeper and a thread waiting for a CPU apart, as schedstat does")
{
    test::require_ptrace();
    busy_target busy(1, 1, 3);
    const pid_t pid = busy.pid();
    const pid_t spinner = busy.tids("spin").at(0), sleeper = busy.tids("sleep").at(0);
    const auto crowd = busy.tids("crowd");
    REQUIRE(crowd.size() == 3);
    const std::vector<pid_t> watched{spinner, sleeper, crowd[0], crowd[1], crowd[2]};

    // Commands from stdin, each run as its line arrives: the test's window
    // opens just before `sleep 4` is sent and closes when its split arrives.
    live_tdctl tdctl(pid, {});
    REQUIRE(tdctl.next().value("type", "") == "attached");
    const auto before = read_now(pid, watched);
    REQUIRE(tdctl.child.write_stdin("sleep 4\n"));
    std::vector<json> split{tdctl.next_of_type("time_split")};
    const auto after = read_now(pid, watched);
    tdctl.child.close_stdin();
    for (const auto& r : tdctl.run_of("time_split"))
        split.push_back(r);
    tdctl.require_clean_end();
    INFO("tdctl:\n", tdctl.describe());

    const double wall = seconds_between(before, after);
    auto rows = rows_by_tid(split);
    REQUIRE(rows.size() == 6);   // and main
    struct shares {
        double on = 0, wait = 0, off = 0;
    };
    auto tdctl_shares = [&](pid_t t) {
        const json& r = rows.at(t);
        const double d = r["duration"].get<double>();
        return shares{r["on_cpu"].get<double>() / d, r["wait"].get<double>() / d, r["off"].get<double>() / d};
    };
    auto kernel_shares = [&](pid_t t) {
        const auto& b = before.tasks.at(t);
        const auto& a = after.tasks.at(t);
        shares s{static_cast<double>(a.cpu_ns - b.cpu_ns) / 1e9 / wall,
                 static_cast<double>(a.wait_ns - b.wait_ns) / 1e9 / wall, 0};
        s.off = std::max(0.0, 1.0 - s.on - s.wait);
        return s;
    };
    for (pid_t t : watched) {
        REQUIRE(rows.contains(t));
        const json& r = rows.at(t);
        CHECK(r["command"] == "sleep");
        CHECK(r["pid"] == pid);
        CHECK(r["duration"].get<double>() >= 4.0);
        const auto got = tdctl_shares(t), want = kernel_shares(t);
        INFO("tid ", t, ": ", r.dump(), "; schedstat over ", wall, " s: on ", want.on, ", wait ", want.wait,
             ", off ", want.off);
        // 1 % of the window: what a run-queue wait still running at either
        // end hides (the kernel charges it when it ends). Off CPU is the rest
        // of the window, so it carries the error of both.
        CHECK(within_10_percent(got.on, want.on, 0.01));
        CHECK(within_10_percent(got.wait, want.wait, 0.01));
        CHECK(within_10_percent(got.off, want.off, 0.02));
    }
    // Told apart: a spinner never blocks; a sleeper hardly runs; three
    // spinners on one CPU each run at most a third of the time and wait the rest.
    const auto spin = tdctl_shares(spinner), nap = tdctl_shares(sleeper);
    CHECK(spin.off < 0.05);
    CHECK(spin.on > 0.05);
    CHECK(nap.off > 0.90);
    CHECK(nap.on < 0.05);
    for (pid_t t : crowd) {
        const auto c = tdctl_shares(t);
        INFO("crowded ", t, ": on ", c.on, ", wait ", c.wait, ", off ", c.off);
        CHECK(c.off < 0.05);
        CHECK(c.on < 0.40);
        CHECK(c.wait > 0.55);
    }
}

TEST_CASE("watch's time split: every thread born and ended during the watch, and the rows beyond 32 summed in one")
{
    test::require_ptrace();
    struct shape {
        int outer, inner;
    };
    for (shape s : {shape{2, 3}, shape{8, 10}}) {
        CAPTURE(s.outer);
        test::temp_file record("tdctl-top-churn");
        auto run = test::run_command({test::tdctl_path(), "--json", "--", test::fixture_path("churn"), "--record",
                                      record.path(), std::to_string(s.outer), std::to_string(s.inner)},
                                     60s);
        INFO(run.describe());
        REQUIRE(run.status.is_success());
        // A launch with --json: the records are on stderr.
        auto records = test::json_lines(run.err);
        std::vector<json> split;
        bool after_end = false;
        for (const auto& r : records) {
            after_end = after_end || r.value("type", "") == "watch_end";
            if (r.value("type", "") == "time_split") {
                CHECK(after_end);
                split.push_back(r);
            }
        }
        const auto created = test::thread_tids(test::read_record(record.path()));
        const std::size_t threads = created.size() + 1;   // and main
        REQUIRE(created.size() == static_cast<std::size_t>(s.outer * (1 + s.inner)));
        std::size_t counted = 0;
        std::multiset<pid_t> born;
        for (const auto& r : split) {
            CHECK(r["command"] == "watch");
            if (r["tid"].is_null()) {
                counted += r["threads"].get<std::size_t>();
                continue;
            }
            ++counted;
            CHECK(r["ended"] == true);   // the process exited
            if (r["born"] == true)
                born.insert(r["tid"].get<pid_t>());
        }
        CHECK(counted == threads);
        CHECK(split.size() == std::min<std::size_t>(threads, 33));
        if (threads <= 32) {
            std::multiset<pid_t> expected(created.begin(), created.end());
            CHECK(born == expected);
        }
    }
}

TEST_CASE("sleep's time split on a storm of threads that name themselves: each row shown has its thread's name, "
          "the others are summed in one row")
{
    // Nothing is armed, so each name is read at the thread's exit stop, and
    // only for a thread that can still rank among the rows shown.
    test::require_ptrace();
    test::temp_file record("tdctl-split-names");
    auto run = test::run_command({test::tdctl_path(), "--json", "-e", "sleep 120", "--", test::fixture_path("churn"),
                                  "--record", record.path(), "--named", "8", "10"},
                                 60s);
    INFO(run.describe());
    REQUIRE(run.status.is_success());
    std::map<pid_t, std::string> label;
    for (const auto& f : test::read_record(record.path()))
        if (f.kind == "thread")
            label[f.id()] = f.label();
    REQUIRE(label.size() == 88);
    std::size_t rows = 0, counted = 0;
    for (const auto& r : test::json_lines(run.err)) {
        if (r.value("type", "") != "time_split")
            continue;
        CHECK(r["command"] == "sleep");
        ++rows;
        if (r["tid"].is_null()) {
            counted += r["threads"].get<std::size_t>();
            continue;
        }
        ++counted;
        const pid_t tid = r["tid"].get<pid_t>();
        CAPTURE(tid);
        if (tid == r["pid"].get<pid_t>())
            CHECK(r["name"] == "churn");
        else if (label.contains(tid))
            CHECK(r["name"] == label[tid]);   // "inner" threads renamed from their creator's "outer"
        else
            FAIL("a row for a thread the fixture did not record");
    }
    CHECK(rows == 33);
    CHECK(counted == 89);
}

TEST_CASE("SIGTERM and SIGINT during top: a clean detach, exit 128+N, the target runs on untraced")
{
    test::require_ptrace();
    for (int sig : {SIGTERM, SIGINT}) {
        CAPTURE(sig);
        busy_target busy(1, 1, 0);
        live_tdctl tdctl(busy.pid(), {"-e", "top --interval 0.2"});
        tdctl.next_of_type("top_process");
        REQUIRE(tdctl.child.send_signal(sig));
        auto status = tdctl.child.require_exit(20s);
        INFO("tdctl stdout:\n", tdctl.child.stdout_text(), "stderr:\n", tdctl.child.stderr_text());
        CHECK(status.exit_code() == 128 + sig);
        auto records = test::json_lines(tdctl.child.stdout_text());
        CHECK(std::count_if(records.begin(), records.end(),
                            [](const json& r) { return r.value("type", "") == "detached"; }) == 1);
        CHECK(test::wait_until([&] { return test::tracer_pid(busy.pid()) == 0; }, 10s));
        CHECK(test::proc_state(busy.pid()) != std::optional<char>('t'));
        CHECK(!busy.child.wait_exit(0ms).has_value());
    }
}

TEST_CASE("top --sort and --limit; a bad column is a usage error")
{
    test::require_ptrace();
    busy_target busy(1, 3, 0);
    auto run = run_tdctl_json(busy.pid(), evals({"top --interval 0.3 --count 2 --sort tid --limit 3"}));
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto rows = run.of_type("top");
    REQUIRE(rows.size() == 6);   // 2 intervals of 3 rows out of 5 threads
    std::vector<pid_t> lowest = test::task_tids(busy.pid());
    REQUIRE(lowest.size() == 5);
    lowest.resize(3);
    for (std::size_t i = 0; i < rows.size(); i += 3) {
        std::vector<pid_t> shown;
        for (std::size_t j = i; j < i + 3; ++j)
            shown.push_back(rows[j]["tid"].get<pid_t>());
        CHECK(shown == lowest);
    }
    CHECK(run.of_type("top_process").size() == 2);
    CHECK(run.of_type("top_process")[0]["threads"] == 5);

    auto by_cpu = run_tdctl_json(busy.pid(), evals({"top --interval 0.3 --count 1 --limit 1"}));
    INFO(by_cpu.describe());
    REQUIRE(by_cpu.of_type("top").size() == 1);
    CHECK(by_cpu.of_type("top")[0]["tid"] == busy.tids("spin").at(0));

    auto bad = run_tdctl_json(busy.pid(), evals({"top --sort bogus"}));
    INFO(bad.describe());
    CHECK(bad.result.status.exit_code() == 2);
    CHECK(bad.result.err.find("unknown column 'bogus'") != std::string::npos);
}

TEST_CASE("top in text: pidstat's columns, a process line, one |__ row per thread")
{
    test::require_ptrace();
    busy_target busy(1, 1, 0);
    auto run = test::run_command({test::tdctl_path(), "-p", std::to_string(busy.pid()), "-e",
                                  "top --interval 0.3 --count 1"},
                                 60s);
    INFO(run.describe());
    REQUIRE(run.status.is_success());
    CHECK(run.out.find("%usr    %sys   %wait    %off   cswch/s nvcswch/s  minflt/s majflt/s  Command") !=
          std::string::npos);
    CHECK(run.out.find(fmt::format(" {} ", busy.pid())) != std::string::npos);
    // The process line says what its %wait and %off are of: not one thread's interval.
    CHECK(run.out.find("busy (3 threads, 0 born, 0 ended; %wait, %off of ") != std::string::npos);
    CHECK(run.out.find(" thread-seconds)") != std::string::npos);
    std::size_t rows = 0;
    for (std::size_t at = run.out.find("|__busy"); at != std::string::npos; at = run.out.find("|__busy", at + 1))
        ++rows;
    CHECK(rows == 3);
}

}  // namespace
}  // namespace tdctl::stats_test
