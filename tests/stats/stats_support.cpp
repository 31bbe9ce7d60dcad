#include "tests/stats/stats_support.hpp"

#include <algorithm>
#include <cstring>
#include <sched.h>
#include <sstream>
#include <stdexcept>
#include <time.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "base/error.hpp"

namespace tdctl::stats_test {

namespace {

using clock = std::chrono::steady_clock;

std::string task_dir(pid_t pid, pid_t tid)
{
    return tid == 0 ? fmt::format("/proc/{}", pid) : fmt::format("/proc/{}/task/{}", pid, tid);
}

}  // namespace

std::optional<sched_sample> read_sched(pid_t pid, pid_t tid)
{
    auto text = test::read_text_file(task_dir(pid, tid) + "/schedstat");
    if (!text)
        return std::nullopt;
    std::istringstream in(*text);
    sched_sample s;
    if (!(in >> s.cpu_ns >> s.wait_ns))
        return std::nullopt;
    return s;
}

std::optional<stat_sample> read_stat(pid_t pid, pid_t tid)
{
    auto text = test::read_text_file(task_dir(pid, tid) + "/stat");
    if (!text)
        return std::nullopt;
    // comm (field 2) may hold spaces and ')': fields resume after the last ')'.
    auto close = text->rfind(')');
    if (close == std::string::npos)
        return std::nullopt;
    std::istringstream in(text->substr(close + 1));
    std::vector<std::string> f;   // f[0] is field 3 (state)
    for (std::string w; in >> w;)
        f.push_back(w);
    if (f.size() < 20)
        return std::nullopt;
    auto field = [&](int n) { return std::stoull(f[static_cast<std::size_t>(n - 3)]); };
    stat_sample s;
    s.state = f[0].empty() ? '?' : f[0][0];
    s.minflt = field(10);
    s.majflt = field(12);
    s.utime = field(14);
    s.stime = field(15);
    s.starttime = field(22);
    return s;
}

std::optional<std::map<std::string, std::uint64_t>> read_status_numbers(pid_t pid, pid_t tid)
{
    auto text = test::read_text_file(task_dir(pid, tid) + "/status");
    if (!text)
        return std::nullopt;
    std::map<std::string, std::uint64_t> out;
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) {
        auto colon = line.find(':');
        if (colon == std::string::npos)
            continue;
        std::istringstream value(line.substr(colon + 1));
        std::uint64_t v = 0;
        if (value >> v)
            out[line.substr(0, colon)] = v;
    }
    return out;
}

std::optional<io_sample> read_io(pid_t pid, pid_t tid)
{
    auto text = test::read_text_file(task_dir(pid, tid) + "/io");
    if (!text)
        return std::nullopt;
    io_sample io;
    std::istringstream in(*text);
    bool got_r = false, got_w = false;
    for (std::string key; in >> key;) {
        std::uint64_t v = 0;
        in >> v;
        if (key == "read_bytes:") {
            io.read_bytes = v;
            got_r = true;
        } else if (key == "write_bytes:") {
            io.write_bytes = v;
            got_w = true;
        }
    }
    if (!got_r || !got_w)
        return std::nullopt;
    return io;
}

std::optional<usage_sample> read_usage(pid_t pid, pid_t tid)
{
    usage_sample u;
    auto st = read_stat(pid, tid);
    auto status = read_status_numbers(pid, tid);
    auto proc_status = read_status_numbers(pid, 0);
    auto io = read_io(pid, tid);
    if (!st || !status || !proc_status || !io)
        return std::nullopt;
    u.stat = *st;
    u.nvcsw = (*status)["voluntary_ctxt_switches"];
    u.nivcsw = (*status)["nonvoluntary_ctxt_switches"];
    u.vm_hwm_kb = (*proc_status)["VmHWM"];
    u.io = *io;
    return u;
}

process_sched read_process_sched(pid_t pid)
{
    process_sched p;
    for (pid_t tid : test::task_tids(pid))
        if (auto s = read_sched(pid, tid))
            p.tasks[tid] = *s;
    p.at_ns = monotonic_ns();
    return p;
}

sched_delta delta(const process_sched& before, const process_sched& after)
{
    sched_delta d;
    for (const auto& [tid, a] : after.tasks) {
        auto it = before.tasks.find(tid);
        if (it == before.tasks.end())
            continue;
        d.cpu_ns += a.cpu_ns - it->second.cpu_ns;
        d.wait_ns += a.wait_ns - it->second.wait_ns;
    }
    d.wall_ns = after.at_ns - before.at_ns;
    return d;
}

std::uint64_t monotonic_ns()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

long ticks_per_second()
{
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? hz : 100;
}

int cpus_of(pid_t pid)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(pid, sizeof set, &set) != 0)
        return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    return std::max(1, CPU_COUNT(&set));
}

// ---------------------------------------------------------------- fixture

std::string stats_target_path()
{
    return TDCTL_STATS_TARGET;
}

stats_target::stats_target()
    : record_("tdctl-stats-target"),
      child_(test::child_process::spawn({stats_target_path(), "--record", record_.path()}))
{
    // One round trip: libc is loaded and the worker runs (an attach before the
    // loader mapped libc would find no thread library).
    std::string w = ask_expect("worker", "worker ", nullptr);
    worker_ = static_cast<pid_t>(std::stol(w.substr(7)));
}

std::string stats_target::ask(std::string_view command, core::session* s, std::chrono::milliseconds timeout)
{
    std::string line(command);
    line += '\n';
    if (!child_.write_stdin(line))
        throw std::runtime_error(fmt::format("{}: stdin closed while sending '{}'; stderr: {}", child_.describe(),
                                             command, child_.stderr_text()));
    auto deadline = clock::now() + timeout;
    while (clock::now() < deadline) {
        bool serviced = s != nullptr && s->is_alive() && !s->is_held();
        if (serviced)
            (void)s->pump(1);
        if (auto answer = child_.read_line(serviced ? 1ms : 50ms))
            return *answer;
    }
    throw std::runtime_error(fmt::format("{}: no answer to '{}' within {} ms; stderr: {}", child_.describe(), command,
                                         timeout.count(), child_.stderr_text()));
}

std::string stats_target::ask_expect(std::string_view command, std::string_view expect, core::session* s,
                                     std::chrono::milliseconds timeout)
{
    std::string answer = ask(command, s, timeout);
    if (!answer.starts_with(expect))
        throw std::runtime_error(
            fmt::format("stats_target: answer to '{}' was '{}', expected '{}...'", command, answer, expect));
    return answer;
}

void pump_for(core::session& s, std::chrono::milliseconds duration)
{
    auto deadline = clock::now() + duration;
    for (;;) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
        if (left <= 0 || !s.is_alive())
            return;
        (void)s.pump(static_cast<int>(std::min<long long>(left, 20)));
    }
}

std::unique_ptr<core::session> attach(pid_t pid)
{
    try {
        return core::session::attach(pid);
    } catch (const error& e) {
        FAIL("attach to ", pid, " failed: ", e.what());
    }
    return nullptr;
}

namespace {

std::uint64_t process_cpu_ticks_of(pid_t pid)
{
    auto st = read_stat(pid, 0);
    REQUIRE_MESSAGE(st.has_value(), "cannot read /proc/", pid, "/stat");
    return st->utime + st->stime;
}

}  // namespace

void check_stats_across_exec(const char* exec_command)
{
    stats_target target;
    pid_t pid = target.pid();
    auto s = attach(pid);
    // CPU time of the worker before the window, so a wrong base shows.
    target.ask_expect("spin 300", "spun", s.get());
    std::uint64_t ticks0 = process_cpu_ticks_of(pid);
    REQUIRE(s->accounting().enable_stats(true).has_value());
    target.ask_expect("spin 200", "spun", s.get());
    std::string execd = target.ask_expect(exec_command, "execd ", s.get());
    CHECK(execd == fmt::format("execd {}", pid));
    target.ask_expect("spin 300", "spun", s.get());   // the new image's worker
    pump_for(*s, 50ms);
    auto st = s->accounting().get_stats();
    std::uint64_t ticks1 = process_cpu_ticks_of(pid);
    REQUIRE(st.has_value());
    const auto& a = st->averages;
    const double tick_ns = 1e9 / static_cast<double>(ticks_per_second());
    const double proc_ns = static_cast<double>(ticks1 - ticks0) * tick_ns;
    INFO(fmt::format("after '{}': nthreads {}, a_concurrency_num {} ns, nrunnable {:.3f}, nlwps {:.3f} over {:.3f} s; "
                     "process utime+stime grew {} ticks = {:.0f} ns; tasks now {}",
                     exec_command, st->td.nthreads, a.a_concurrency.num, a.nrunnable.value(), a.nlwps.value(),
                     a.window_seconds, ticks1 - ticks0, proc_ns, test::task_tids(pid).size()));
    CHECK(st->td.nthreads == 2);
    CHECK(std::abs(static_cast<double>(a.a_concurrency.num) - proc_ns) <= 0.10 * proc_ns + 4 * tick_ns);
    CHECK(a.nlwps.value() == doctest::Approx(2.0).epsilon(0.10));
}

// ---------------------------------------------------------------- tdctl --json

std::vector<json> cli_run::of_type(std::string_view type) const
{
    std::vector<json> out;
    for (const auto& r : records)
        if (r.is_object() && r.value("type", "") == type)
            out.push_back(r);
    return out;
}

std::string cli_run::describe() const
{
    std::string d = result.describe();
    if (d.size() > 6000)
        d = d.substr(0, 3000) + "\n...\n" + d.substr(d.size() - 3000);
    return d;
}

cli_run run_tdctl_json(pid_t pid, const std::vector<std::string>& args, std::chrono::milliseconds timeout)
{
    std::vector<std::string> argv{test::tdctl_path(), "--json", "-p", std::to_string(pid)};
    argv.insert(argv.end(), args.begin(), args.end());
    cli_run run{test::run_command(argv, timeout), {}};
    run.records = test::json_lines(run.result.out);
    return run;
}

std::vector<std::string> evals(const std::vector<std::string>& commands)
{
    std::vector<std::string> out;
    for (const auto& c : commands) {
        out.push_back("-e");
        out.push_back(c);
    }
    return out;
}

}  // namespace tdctl::stats_test
