// Acceptance 4–5 of the statistics issue (SPEC §7, seeds 001 and 004): every
// rusage field of a thread equals what /proc says for that TID at the same
// moment (read just before and just after); counters move when the thread
// faults, sleeps, writes or gets signals; the seed's START / STOP / COLLECT
// modes; lwpinfo's times against schedstat.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <set>
#include <sstream>
#include <string>

#include <sys/syscall.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/accounting/lwp_usage.hpp"
#include "tests/stats/stats_support.hpp"

namespace tdctl::stats_test {
namespace {

constexpr double ns_per_s = 1e9;

/// A timeval from tdctl as clock ticks (exact: tdctl converts ticks to µs).
std::uint64_t to_ticks(const timeval& tv)
{
    long hz = ticks_per_second();
    return static_cast<std::uint64_t>(tv.tv_sec) * static_cast<std::uint64_t>(hz) +
           (static_cast<std::uint64_t>(tv.tv_usec) * static_cast<std::uint64_t>(hz) + 500000) / 1000000;
}

std::string describe(const struct rusage& ru)
{
    return fmt::format("utime {}.{:06} stime {}.{:06} maxrss {} minflt {} majflt {} inblock {} oublock {} nvcsw {} "
                       "nivcsw {} nsignals {} (ixrss {} idrss {} isrss {} nswap {} msgsnd {} msgrcv {})",
                       ru.ru_utime.tv_sec, ru.ru_utime.tv_usec, ru.ru_stime.tv_sec, ru.ru_stime.tv_usec, ru.ru_maxrss,
                       ru.ru_minflt, ru.ru_majflt, ru.ru_inblock, ru.ru_oublock, ru.ru_nvcsw, ru.ru_nivcsw,
                       ru.ru_nsignals, ru.ru_ixrss, ru.ru_idrss, ru.ru_isrss, ru.ru_nswap, ru.ru_msgsnd, ru.ru_msgrcv);
}

std::string describe(const usage_sample& u)
{
    return fmt::format("utime {} stime {} ticks, VmHWM {} kB, minflt {} majflt {}, read_bytes {} write_bytes {}, "
                       "nvcsw {} nivcsw {}",
                       u.stat.utime, u.stat.stime, u.vm_hwm_kb, u.stat.minflt, u.stat.majflt, u.io.read_bytes,
                       u.io.write_bytes, u.nvcsw, u.nivcsw);
}

/// `got` lies between the values /proc gave just before and just after.
#define CHECK_BETWEEN(got, lo, hi)                                                  \
    do {                                                                            \
        auto got_ = static_cast<std::uint64_t>(got);                                \
        INFO(#got, " = ", got_, ", /proc before ", (lo), ", after ", (hi));         \
        CHECK(got_ >= static_cast<std::uint64_t>(lo));                              \
        CHECK(got_ <= static_cast<std::uint64_t>(hi));                              \
    } while (0)

/// Collects one TID between two /proc readings and compares every field.
struct rusage_reading {
    struct rusage ru {};
    usage_sample before, after;
};

rusage_reading collect_checked(core::session& s, pid_t pid, pid_t tid, std::uint64_t expect_signals)
{
    rusage_reading r;
    auto before = read_usage(pid, tid);
    auto ru = s.accounting().rusage_collect(tid_t{tid});
    auto after = read_usage(pid, tid);
    REQUIRE_MESSAGE(before.has_value(), "cannot read /proc for tid ", tid);
    REQUIRE_MESSAGE(after.has_value(), "cannot read /proc for tid ", tid);
    REQUIRE_MESSAGE(ru.has_value(), "rusage_collect(", tid, ") failed: errno ", ru.error());
    r.ru = *ru;
    r.before = *before;
    r.after = *after;
    INFO("tid ", tid, ": ", describe(r.ru));
    INFO("/proc before: ", describe(r.before));
    INFO("/proc after:  ", describe(r.after));
    CHECK_BETWEEN(to_ticks(r.ru.ru_utime), r.before.stat.utime, r.after.stat.utime);
    CHECK_BETWEEN(to_ticks(r.ru.ru_stime), r.before.stat.stime, r.after.stat.stime);
    CHECK_BETWEEN(r.ru.ru_maxrss, r.before.vm_hwm_kb, r.after.vm_hwm_kb);
    CHECK_BETWEEN(r.ru.ru_minflt, r.before.stat.minflt, r.after.stat.minflt);
    CHECK_BETWEEN(r.ru.ru_majflt, r.before.stat.majflt, r.after.stat.majflt);
    CHECK_BETWEEN(r.ru.ru_inblock, r.before.io.read_bytes / 512, r.after.io.read_bytes / 512);
    CHECK_BETWEEN(r.ru.ru_oublock, r.before.io.write_bytes / 512, r.after.io.write_bytes / 512);
    CHECK_BETWEEN(r.ru.ru_nvcsw, r.before.nvcsw, r.after.nvcsw);
    CHECK_BETWEEN(r.ru.ru_nivcsw, r.before.nivcsw, r.after.nivcsw);
    CHECK(static_cast<std::uint64_t>(r.ru.ru_nsignals) == expect_signals);
    // Not kept by Linux: 0.
    CHECK(r.ru.ru_ixrss == 0);
    CHECK(r.ru.ru_idrss == 0);
    CHECK(r.ru.ru_isrss == 0);
    CHECK(r.ru.ru_nswap == 0);
    CHECK(r.ru.ru_msgsnd == 0);
    CHECK(r.ru.ru_msgrcv == 0);
    return r;
}

/// Waits (servicing the session's stops) until the fixture's handler has
/// counted `n` SIGUSR1s.
void wait_sigcount(stats_target& target, core::session* s, int n)
{
    for (int i = 0; i < 2000; ++i) {
        std::string answer = target.ask_expect("sigcount", "sigcount ", s);
        if (std::stoi(answer.substr(9)) >= n)
            return;
        if (s != nullptr)
            (void)s->pump(2);
        else
            ::usleep(2000);
    }
    FAIL("the worker's handler did not count ", n, " signals");
}

void send_usr1(pid_t pid, pid_t tid)
{
    REQUIRE(::syscall(SYS_tgkill, pid, tid, SIGUSR1) == 0);
}

// ---------------------------------------------------------------- 4

TEST_CASE("rusage: every field is the /proc value of that TID at the same moment")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    auto s = attach(pid);
    target.ask_expect("park 2", "parked 2", s.get());
    s->accounting().rusage_start();
    // The worker spins meanwhile, so its times move while they are read.
    REQUIRE(target.child().write_stdin("spin 600\n"));
    pump_for(*s, 100ms);
    auto tids = test::task_tids(pid);
    REQUIRE(tids.size() == 4);
    for (int round = 0; round < 3; ++round)
        for (pid_t tid : tids)
            collect_checked(*s, pid, tid, 0);
    auto spun = target.child().require_line(5000ms);
    CHECK(spun == "spun 600");
}

TEST_CASE("rusage: minflt, maxrss, nvcsw and oublock grow as the thread faults, sleeps and writes")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    pid_t w = target.worker();
    auto s = attach(pid);
    s->accounting().rusage_start();
    auto r0 = collect_checked(*s, pid, w, 0);

    // 4096 fresh pages: at least that many minor faults, and 16 MiB more RSS.
    constexpr long pages = 4096;
    target.ask_expect(fmt::format("touch {}", pages), "touched", s.get());
    auto r1 = collect_checked(*s, pid, w, 0);
    CHECK(r1.ru.ru_minflt - r0.ru.ru_minflt >= pages);
    long page_kb = sysconf(_SC_PAGESIZE) / 1024;
    CHECK(r1.ru.ru_maxrss - r0.ru.ru_maxrss >= pages * page_kb * 9 / 10);
    CHECK(r1.ru.ru_nvcsw - r0.ru.ru_nvcsw < 20);

    // 30 naps of 1 ms: at least 30 voluntary switches.
    target.ask_expect("naps 30", "napped 30", s.get());
    auto r2 = collect_checked(*s, pid, w, 0);
    CHECK(r2.ru.ru_nvcsw - r1.ru.ru_nvcsw >= 30);
    CHECK(r2.ru.ru_minflt - r1.ru.ru_minflt < pages / 4);

    // 1 MiB written and fsynced: 2048 blocks of 512 bytes out, when the file
    // system accounts them (tmpfs does not).
    test::temp_file file("tdctl-stats-write");
    target.ask_expect(fmt::format("write 1024 {}", file.path()), "wrote 1024", s.get());
    auto r3 = collect_checked(*s, pid, w, 0);
    if (r3.after.io.write_bytes - r2.after.io.write_bytes >= 1024 * 1024)
        CHECK(r3.ru.ru_oublock - r2.ru.ru_oublock >= 2048);
    else
        MESSAGE("the file system of ", file.path(), " does not account write_bytes: oublock not checked for growth");

    // The other threads' counters did not move with the worker's.
    auto m = s->accounting().rusage_collect(tid_t{pid});
    REQUIRE(m.has_value());
    CHECK(m->ru_minflt < r1.ru.ru_minflt);
}

TEST_CASE("rusage: ru_nsignals counts the signals delivered to that thread while attached")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    pid_t w = target.worker();
    // Before the attach: not counted.
    for (int i = 1; i <= 3; ++i) {
        send_usr1(pid, w);
        wait_sigcount(target, nullptr, i);
    }
    auto s = attach(pid);
    s->accounting().rusage_start();
    collect_checked(*s, pid, w, 0);
    constexpr int n = 12;
    for (int i = 1; i <= n; ++i) {
        send_usr1(pid, w);
        wait_sigcount(target, s.get(), 3 + i);   // one at a time: two pending ones would merge
        CHECK(s->accounting().rusage_collect(tid_t{w})->ru_nsignals == i);
    }
    collect_checked(*s, pid, w, n);
    // Only the worker got them.
    collect_checked(*s, pid, pid, 0);
    auto facts = test::read_record(target.record_path());
    CHECK(test::count_kind(facts, "signal-got") <= 3 + n);
}

TEST_CASE("rusage: ru_nsignals of a thread that keeps hitting clone stops and event breakpoints")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    auto s = attach(pid);
    // Armed TD_CREATE / TD_DEATH: the churn driver stops at every clone and at
    // the creation reporting address, and steps over its breakpoint; signals
    // that arrive meanwhile must still be counted once each.
    REQUIRE(s->arm({TD_CREATE, TD_DEATH}).has_value());
    s->accounting().rusage_start();
    std::string on = target.ask_expect("churn on", "churn on ", s.get());
    pid_t churner = static_cast<pid_t>(std::stol(on.substr(9)));
    constexpr int n = 40;
    for (int i = 1; i <= n; ++i) {
        send_usr1(pid, churner);
        bool counted = false;
        for (int j = 0; j < 2000 && !counted; ++j) {
            std::string answer = target.ask_expect("sigcount", "sigcount ", s.get());
            counted = std::stoi(answer.substr(answer.rfind(' ') + 1)) >= i;
            if (!counted)
                (void)s->pump(2);
        }
        REQUIRE_MESSAGE(counted, "signal ", i, " to the churn driver was not handled");
    }
    auto ru = s->accounting().rusage_collect(tid_t{churner});
    REQUIRE(ru.has_value());
    std::string off = target.ask_expect("churn off", "churn off ", s.get());
    INFO(off);
    CHECK(ru->ru_nsignals == n);
    CHECK(std::stol(off.substr(10)) >= 8);   // it did churn meanwhile (a few batches)
    CHECK(s->accounting().rusage_collect(tid_t{target.worker()})->ru_nsignals == 0);
}

TEST_CASE("rusage through tdctl: ru_nsignals in a `rusage collect --interval` loop while signals arrive")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    pid_t w = target.worker();
    auto tdctl = test::child_process::spawn({test::tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                             "rusage start", "-e",
                                             fmt::format("rusage collect {} --interval 0.1 --count 60", w)});
    auto next_rusage = [&]() -> json {
        for (;;) {
            auto line = tdctl.read_line(5000ms);
            REQUIRE_MESSAGE(line.has_value(), "no rusage record from tdctl; stderr: ", tdctl.stderr_text());
            auto rec = json::parse(*line);
            if (rec.value("type", "") == "rusage")
                return rec;
            REQUIRE_MESSAGE(rec.value("type", "") != "error", *line);
        }
    };
    auto first = next_rusage();
    CHECK(first["tid"] == w);
    CHECK(first["ru_nsignals"] == 0);
    constexpr int n = 5;
    for (int i = 1; i <= n; ++i) {
        send_usr1(pid, w);
        wait_sigcount(target, nullptr, i);   // tdctl delivers it while it waits between rows
    }
    // A row collected after the last signal was counted.
    (void)next_rusage();
    auto last = next_rusage();
    INFO(last.dump());
    CHECK(last["ru_nsignals"] == n);
    for (const char* key : {"ru_ixrss", "ru_idrss", "ru_isrss", "ru_nswap", "ru_msgsnd", "ru_msgrcv"}) {
        INFO(key);
        CHECK(last[key].is_null());
    }
    tdctl.send_signal(SIGTERM);
    auto st = tdctl.wait_exit(10000ms);
    REQUIRE(st.has_value());
    // The target survives and is let go.
    CHECK(test::wait_until([&] { return test::tracer_pid(pid) == 0; }, 5000ms));
    CHECK(target.ask("ping", nullptr) == "pong");
}

TEST_CASE("rusage modes: COLLECT before START is ENOSYS, an unknown TID ESRCH, after STOP ENOSYS again")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    pid_t w = target.worker();
    std::string burst_tids;
    {
        auto s = attach(pid);
        CHECK_FALSE(s->accounting().rusage_enabled());
        auto r = s->accounting().rusage_collect(tid_t{w});
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error() == ENOSYS);
        s->accounting().rusage_start();
        CHECK(s->accounting().rusage_enabled());
        CHECK(s->accounting().rusage_collect(tid_t{w}).has_value());
        // A live task of another process, and one that has ended.
        r = s->accounting().rusage_collect(tid_t{::getpid()});
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error() == ESRCH);
        burst_tids = target.ask_expect("burst 1 1", "burst ", s.get());
        pid_t gone = static_cast<pid_t>(std::stol(burst_tids.substr(6)));
        // Joined in the target: ESRCH at once, while it may still be a zombie
        // the session has not reaped (stats_regression_tests), and after.
        r = s->accounting().rusage_collect(tid_t{gone});
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error() == ESRCH);
        pump_for(*s, 50ms);
        REQUIRE_FALSE(test::task_state(pid, gone).has_value());
        r = s->accounting().rusage_collect(tid_t{gone});
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error() == ESRCH);
        auto li = s->accounting().lwp_info(tid_t{gone});
        REQUIRE_FALSE(li.has_value());
        CHECK(li.error() == ESRCH);
        li = s->accounting().lwp_info(tid_t{::getpid()});
        REQUIRE_FALSE(li.has_value());
        CHECK(li.error() == ESRCH);
        s->accounting().rusage_stop();
        r = s->accounting().rusage_collect(tid_t{w});
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error() == ENOSYS);
        // START again works again.
        s->accounting().rusage_start();
        CHECK(s->accounting().rusage_collect(tid_t{w}).has_value());
    }

    // The same through tdctl: an error record naming the errno, exit status 2,
    // and a clean detach.
    auto expect_error = [&](const std::vector<std::string>& commands, const char* err, std::size_t rusage_rows) {
        auto run = run_tdctl_json(pid, evals(commands));
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 2);
        auto errors = run.of_type("error");
        REQUIRE(errors.size() == 1);
        CHECK(errors[0]["error"] == err);
        CHECK(run.of_type("rusage").size() == rusage_rows);
        CHECK(run.of_type("detached").size() == 1);
        CHECK(test::tracer_pid(pid) == 0);
    };
    std::string me = std::to_string(::getpid());
    expect_error({fmt::format("rusage collect {}", w)}, "ENOSYS", 0);
    expect_error({"rusage start", fmt::format("rusage collect {}", me)}, "ESRCH", 0);
    expect_error({"rusage start", fmt::format("rusage collect {}", w), "rusage stop", fmt::format("rusage collect {}", w)},
                 "ENOSYS", 1);
    expect_error({"rusage collect all"}, "ENOSYS", 0);
    expect_error({fmt::format("lwpinfo {}", me)}, "ESRCH", 0);
    CHECK(target.ask("ping", nullptr) == "pong");
}

TEST_CASE("rusage collect all through tdctl: one row per task, each equal to /proc around the run")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    target.ask_expect("park 3", "parked 3", nullptr);
    auto tids = test::task_tids(pid);
    REQUIRE(tids.size() == 5);
    std::map<pid_t, usage_sample> before, after;
    for (pid_t t : tids)
        before[t] = read_usage(pid, t).value();
    auto run = run_tdctl_json(pid, evals({"rusage start", "rusage collect all", "lwpinfo all"}));
    for (pid_t t : tids)
        after[t] = read_usage(pid, t).value();
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto rows = run.of_type("rusage");
    REQUIRE(rows.size() == tids.size());
    std::set<pid_t> seen;
    long hz = ticks_per_second();
    for (const auto& r : rows) {
        pid_t t = r["tid"].get<pid_t>();
        INFO(r.dump());
        REQUIRE(before.contains(t));
        seen.insert(t);
        const auto& b = before[t];
        const auto& a = after[t];
        CHECK(r["name"] == test::task_comm(pid, t).value_or("?"));
        CHECK_BETWEEN(std::llround(r["ru_utime"].get<double>() * hz), b.stat.utime, a.stat.utime);
        CHECK_BETWEEN(std::llround(r["ru_stime"].get<double>() * hz), b.stat.stime, a.stat.stime);
        CHECK_BETWEEN(r["ru_maxrss"].get<long>(), b.vm_hwm_kb, a.vm_hwm_kb);
        CHECK_BETWEEN(r["ru_minflt"].get<long>(), b.stat.minflt, a.stat.minflt);
        CHECK_BETWEEN(r["ru_majflt"].get<long>(), b.stat.majflt, a.stat.majflt);
        CHECK_BETWEEN(r["ru_inblock"].get<long>(), b.io.read_bytes / 512, a.io.read_bytes / 512);
        CHECK_BETWEEN(r["ru_oublock"].get<long>(), b.io.write_bytes / 512, a.io.write_bytes / 512);
        // Attaching and detaching themselves switch the threads (ptrace stops).
        CHECK_BETWEEN(r["ru_nvcsw"].get<long>(), b.nvcsw, a.nvcsw);
        CHECK_BETWEEN(r["ru_nivcsw"].get<long>(), b.nivcsw, a.nivcsw);
        CHECK(r["ru_nsignals"] == 0);
        for (const char* key : {"ru_ixrss", "ru_idrss", "ru_isrss", "ru_nswap", "ru_msgsnd", "ru_msgrcv"}) {
            INFO(key);
            CHECK(r[key].is_null());
        }
    }
    CHECK(seen == std::set<pid_t>(tids.begin(), tids.end()));
    auto li = run.of_type("lwpinfo");
    CHECK(li.size() == tids.size());
}

TEST_CASE("rusage collect --interval S --count N: N rounds of rows; --count alone is a usage error")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    auto ntasks = test::task_tids(pid).size();
    auto run = run_tdctl_json(pid, evals({"rusage start", "rusage collect all --interval 0.2 --count 3"}));
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto rows = run.of_type("rusage");
    CHECK(rows.size() == 3 * ntasks);
    if (rows.size() == 3 * ntasks) {
        // Rounds are an interval apart.
        double t0 = rows[0]["time"].get<double>(), t2 = rows[2 * ntasks]["time"].get<double>();
        CHECK(t2 - t0 >= 0.4 - 2e-6);
    }
    auto bad = run_tdctl_json(pid, evals({"rusage start", "rusage collect all --count 3"}));
    INFO(bad.describe());
    CHECK(bad.result.status.exit_code() == 2);
    CHECK(bad.of_type("rusage").empty());
    CHECK(bad.of_type("error").size() == 1);
}

TEST_CASE("rusage and lwpinfo of a thread named 'a b) c': the name does not shift the stat fields")
{
    test::require_ptrace();
    // The worker names itself, then uses ~200 ms of CPU and faults in fresh
    // pages before it blocks: utime, stime and minflt are non-zero and differ
    // from their neighbours in the stat line, so a parser that a ')' or a space
    // in the name puts one field off reads a different number.
    stats_target target;
    pid_t pid = target.pid();
    pid_t w = target.worker();
    CHECK(target.ask_expect("name a b) c", "named ", nullptr) == fmt::format("named {}", w));
    REQUIRE(test::task_comm(pid, w) == "a b) c");
    const long hz = ticks_per_second();
    const auto cpu_goal = static_cast<std::uint64_t>(hz / 5);   // 200 ms in clock ticks
    // `spin` is wall time: repeat until the thread really got the CPU, also on
    // a loaded machine (bounded: the REQUIRE below says if it never did).
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (read_stat(pid, w).value().utime < cpu_goal && std::chrono::steady_clock::now() < deadline)
        target.ask_expect("spin 100", "spun", nullptr);
    constexpr long pages = 512;
    target.ask_expect(fmt::format("touch {}", pages), "touched", nullptr);

    auto before = read_usage(pid, w).value();
    auto sched_before = read_sched(pid, w).value();
    INFO("/proc before: ", describe(before));
    // The fixture did its job: numbers a field shift would change.
    REQUIRE_MESSAGE(before.stat.utime >= cpu_goal, "the worker did not get 200 ms of CPU within 30 s");
    REQUIRE(before.stat.minflt >= static_cast<std::uint64_t>(pages));
    REQUIRE(before.stat.utime != before.stat.stime);
    auto run = run_tdctl_json(pid, evals({"rusage start", fmt::format("rusage collect {}", w),
                                          fmt::format("lwpinfo {}", w)}));
    auto after = read_usage(pid, w).value();
    auto sched_after = read_sched(pid, w).value();
    INFO("/proc after: ", describe(after));
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto rows = run.of_type("rusage");
    REQUIRE(rows.size() == 1);
    const auto& r = rows[0];
    CHECK(r["tid"] == w);
    CHECK(r["name"] == "a b) c");
    CHECK_BETWEEN(std::llround(r["ru_utime"].get<double>() * hz), before.stat.utime, after.stat.utime);
    CHECK_BETWEEN(std::llround(r["ru_stime"].get<double>() * hz), before.stat.stime, after.stat.stime);
    CHECK_BETWEEN(r["ru_maxrss"].get<long>(), before.vm_hwm_kb, after.vm_hwm_kb);
    CHECK_BETWEEN(r["ru_minflt"].get<long>(), before.stat.minflt, after.stat.minflt);
    CHECK_BETWEEN(r["ru_majflt"].get<long>(), before.stat.majflt, after.stat.majflt);
    CHECK_BETWEEN(r["ru_inblock"].get<long>(), before.io.read_bytes / 512, after.io.read_bytes / 512);
    CHECK_BETWEEN(r["ru_oublock"].get<long>(), before.io.write_bytes / 512, after.io.write_bytes / 512);
    CHECK_BETWEEN(r["ru_nvcsw"].get<long>(), before.nvcsw, after.nvcsw);
    CHECK_BETWEEN(r["ru_nivcsw"].get<long>(), before.nivcsw, after.nivcsw);
    CHECK(r["ru_nsignals"] == 0);
    for (const char* key : {"ru_ixrss", "ru_idrss", "ru_isrss", "ru_nswap", "ru_msgsnd", "ru_msgrcv"}) {
        INFO(key);
        CHECK(r[key].is_null());
    }
    auto li = run.of_type("lwpinfo");
    REQUIRE(li.size() == 1);
    CHECK(li[0]["tid"] == w);
    CHECK(li[0]["name"] == "a b) c");
    double t = li[0]["lwp_utime"].get<double>() + li[0]["lwp_stime"].get<double>();
    CHECK(t * ns_per_s >= static_cast<double>(sched_before.cpu_ns) - 2.0);
    CHECK(t * ns_per_s <= static_cast<double>(sched_after.cpu_ns) + 2.0);
    CHECK(li[0]["lwp_utime"].get<double>() >= li[0]["lwp_stime"].get<double>());

    // The session API reads the same files: every field again.
    auto s = attach(pid);
    s->accounting().rusage_start();
    collect_checked(*s, pid, w, 0);
    CHECK(s->target().thread_name(tid_t{w}) == "a b) c");
}

TEST_CASE("rusage collect all as text: a table with n/a columns and a process line that includes exited threads")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    // Threads that used CPU and are gone: their time is in the process line only.
    target.ask_expect("burst 2 300", "burst ", nullptr);
    auto res = test::run_command({test::tdctl_path(), "-p", std::to_string(pid), "-e", "rusage start", "-e",
                                  "rusage collect all"},
                                 30000ms);
    INFO(res.describe());
    REQUIRE(res.status.is_success());
    std::istringstream in(res.out);
    double sum_threads = 0, process_total = -1;
    int rows = 0;
    bool header = false;
    for (std::string line; std::getline(in, line);) {
        if (line.find("TID") != std::string::npos && line.find("nsignals") != std::string::npos) {
            header = true;
            continue;
        }
        std::istringstream f(line);
        long tid = 0;
        std::string name;
        double u = 0, sys = 0;
        if (!(f >> tid >> name >> u >> sys))
            continue;
        if (name == "(process)") {
            process_total = u + sys;
            CHECK(tid == pid);
        } else if (line.find("n/a n/a n/a n/a n/a n/a") != std::string::npos) {
            sum_threads += u + sys;
            ++rows;
        }
    }
    CHECK(header);
    CHECK(rows == 2);
    REQUIRE(process_total >= 0);
    INFO("process ", process_total, " s, live threads ", sum_threads, " s");
    // The burst threads' time (at least a few ticks each on a busy machine)
    // is in the process line and in no thread row.
    CHECK(process_total >= sum_threads + 0.02);
}

// ---------------------------------------------------------------- 5

TEST_CASE("lwpinfo: lwp_utime + lwp_stime grow by the CPU time schedstat shows; the split follows stat")
{
    test::require_ptrace();
    stats_target target;
    pid_t pid = target.pid();
    pid_t w = target.worker();
    auto s = attach(pid);

    auto total = [](const core::lwp_times& t) {
        return static_cast<double>(t.utime.tv_sec + t.stime.tv_sec) * ns_per_s +
               static_cast<double>(t.utime.tv_nsec + t.stime.tv_nsec);
    };
    auto times = [&]() {
        auto t = s->accounting().lwp_info(tid_t{w});
        REQUIRE_MESSAGE(t.has_value(), "lwp_info(worker) failed: errno ", t.error());
        return *t;
    };
    auto sched = [&]() {
        auto x = read_sched(pid, w);
        REQUIRE(x.has_value());
        return *x;
    };

    // User time: a 700 ms spin.
    auto s0 = sched();
    auto l0 = times();
    auto st0 = read_stat(pid, w).value();
    target.ask_expect("spin 700", "spun", s.get());
    auto l1 = times();
    auto s1 = sched();
    auto st1 = read_stat(pid, w).value();
    double cpu = static_cast<double>(s1.cpu_ns - s0.cpu_ns);
    double got = total(l1) - total(l0);
    INFO(fmt::format("spin: schedstat cpu grew {:.0f} ns, lwp_utime+lwp_stime {:.0f} ns; stat utime +{} stime +{}",
                     cpu, got, st1.utime - st0.utime, st1.stime - st0.stime));
    CHECK(cpu >= 0.05 * ns_per_s);   // it did run, on a busy machine too
    CHECK(cpu <= 0.75 * ns_per_s);   // never more than the wall time of the spin
    CHECK(got == doctest::Approx(cpu).epsilon(0.10));
    double du = static_cast<double>(l1.utime.tv_sec - l0.utime.tv_sec) * ns_per_s +
                static_cast<double>(l1.utime.tv_nsec - l0.utime.tv_nsec);
    // The kernel splits a task's runtime into user and system time in the
    // ratio of its sampled ticks (cputime_adjust): over ~50 ticks on a busy
    // host, interrupts and the tracer's stops can put a fifth of them in
    // system time even for a pure spin.
    CHECK(du >= 0.7 * got);

    // System time: reading /dev/zero for 600 ms.
    auto l2 = times();
    auto s2 = sched();
    auto st2 = read_stat(pid, w).value();
    target.ask_expect("sysspin 600", "sysspun", s.get());
    auto l3 = times();
    auto s3 = sched();
    auto st3 = read_stat(pid, w).value();
    double cpu2 = static_cast<double>(s3.cpu_ns - s2.cpu_ns);
    double got2 = total(l3) - total(l2);
    double ds = static_cast<double>(l3.stime.tv_sec - l2.stime.tv_sec) * ns_per_s +
                static_cast<double>(l3.stime.tv_nsec - l2.stime.tv_nsec);
    INFO(fmt::format("sysspin: schedstat cpu grew {:.0f} ns, lwp total {:.0f} ns, lwp_stime {:.0f} ns; stat utime +{} "
                     "stime +{}",
                     cpu2, got2, ds, st3.utime - st2.utime, st3.stime - st2.stime));
    CHECK(got2 == doctest::Approx(cpu2).epsilon(0.10));
    // The kernel's tick sampling says the time went to the system; so does lwpinfo.
    if (st3.stime - st2.stime > 2 * (st3.utime - st2.utime))
        CHECK(ds >= 0.5 * got2);
    // Totals agree with stat's tick counts within a few ticks and 10 %.
    double stat_total = static_cast<double>(st3.utime + st3.stime) * ns_per_s / ticks_per_second();
    CHECK(std::abs(total(l3) - stat_total) <= 0.10 * stat_total + 3.0 * ns_per_s / ticks_per_second());
}

TEST_CASE("lwpinfo through tdctl: a spinning thread's times lie between schedstat read before and after")
{
    test::require_ptrace();
    test::temp_file record("tdctl-stats-busy");
    auto busy = test::child_process::spawn({test::fixture_path("busy"), "--record", record.path(), "1", "1", "0"});
    auto facts = test::wait_for_fact(record.path(), "done", 1, 10000ms);
    auto spin = test::thread_tids(facts, "spin");
    REQUIRE(spin.size() == 1);
    pid_t pid = busy.pid();
    auto b = read_sched(pid, spin[0]).value();
    auto run = run_tdctl_json(pid, evals({"sleep 0.3", fmt::format("lwpinfo {}", spin[0]), "lwpinfo"}));
    auto a = read_sched(pid, spin[0]).value();
    INFO(run.describe());
    REQUIRE(run.result.status.is_success());
    auto li = run.of_type("lwpinfo");
    REQUIRE(li.size() == 1 + 3);
    CHECK(li[0]["tid"] == spin[0]);
    double t = li[0]["lwp_utime"].get<double>() + li[0]["lwp_stime"].get<double>();
    INFO(fmt::format("schedstat before {} ns, after {} ns; tdctl {:.9f} s", b.cpu_ns, a.cpu_ns, t));
    CHECK(t * ns_per_s >= static_cast<double>(b.cpu_ns) - 2.0);
    CHECK(t * ns_per_s <= static_cast<double>(a.cpu_ns) + 2.0);
    CHECK(li[0]["lwp_utime"].get<double>() >= li[0]["lwp_stime"].get<double>());
    std::set<pid_t> all;
    for (std::size_t i = 1; i < li.size(); ++i)
        all.insert(li[i]["tid"].get<pid_t>());
    auto tids = test::task_tids(pid);
    CHECK(all == std::set<pid_t>(tids.begin(), tids.end()));
}

}  // namespace
}  // namespace tdctl::stats_test
