// Issue 3: statistics, rusage and lwpinfo work "on any target (also one with
// no thread library: nthreads then comes from /proc)". The targets are
// stats_nolib_target with N threads that stay alive, built so no thread-library
// backend can read them: linked statically and stripped of every symbol table,
// and built with musl. nthreads must be the /proc task count (N+1, not a
// constant), and `rusage collect all` / `lwpinfo all` give one row per task.
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/stats/stats_support.hpp"

namespace tdctl::stats_test {
namespace {

constexpr int n_threads = 5;

/// One build of stats_nolib_target (tests/stats/CMakeLists.txt).
struct nolib_build {
    const char* name;
    const char* path;      ///< compiled in; empty when it was not built
    const char* missing;   ///< what to do when it is absent
};

const nolib_build static_stripped{"stats_nolib_static_stripped", TDCTL_STATS_NOLIB_STATIC_STRIPPED,
                                  "it is built with -static -pthread and objcopy --strip-all: is libc6-dev's "
                                  "libc.a installed (scripts/setup-debian.sh)?"};
const nolib_build musl{"stats_nolib_musl", TDCTL_STATS_NOLIB_MUSL,
                       "it is built with musl-gcc, which CMake did not find: install musl-tools "
                       "(scripts/setup-debian.sh does) and reconfigure"};

/// The fixture's path; a build that is missing fails the test (the setup
/// script installs everything it needs).
std::string require_build(const nolib_build& b)
{
    std::string path(b.path);
    REQUIRE_MESSAGE(!path.empty(), "fixture ", b.name, " was not built: ", b.missing);
    REQUIRE_MESSAGE(::access(path.c_str(), X_OK) == 0, "fixture ", b.name, " is missing at ", path, ": ", b.missing);
    return path;
}

std::set<pid_t> as_set(const std::vector<pid_t>& v) { return {v.begin(), v.end()}; }

std::set<pid_t> as_set(const std::vector<tid_t>& v)
{
    std::set<pid_t> out;
    for (tid_t t : v)
        out.insert(t.value);
    return out;
}

std::set<pid_t> tids_of(const std::vector<json>& records)
{
    std::set<pid_t> out;
    for (const auto& r : records)
        out.insert(r["tid"].get<pid_t>());
    return out;
}

/// stats_nolib_target N with a record file, running once its N threads are up.
struct nolib_target {
    test::temp_file record{"tdctl-stats-nolib"};
    test::child_process child;
    std::set<pid_t> tasks;   ///< main and the N threads, from the record

    explicit nolib_target(const std::string& path)
        : child(test::child_process::spawn({path, "--record", record.path(), std::to_string(n_threads)}))
    {
        auto facts = test::wait_for_fact(record.path(), "done", 1, 10s);
        auto threads = test::thread_tids(facts, "parked");
        INFO(test::format_record(facts));
        REQUIRE(threads.size() == n_threads);
        tasks = as_set(threads);
        tasks.insert(child.pid());
        REQUIRE(tasks.size() == n_threads + 1);
        // The fixture did its job: exactly these tasks, all alive.
        REQUIRE(as_set(test::task_tids(child.pid())) == tasks);
    }
};

void check_api(const nolib_build& b)
{
    nolib_target target(require_build(b));
    pid_t pid = target.child.pid();
    auto s = attach(pid);
    INFO(b.name, ": no agent because: ", s->target().no_agent_reason());
    // Nothing a thread-library backend could read.
    CHECK(s->target().agent() == nullptr);
    CHECK(as_set(s->target().lwps()) == target.tasks);

    REQUIRE(s->accounting().enable_stats(true).has_value());
    pump_for(*s, 500ms);
    auto st = s->accounting().get_stats();
    REQUIRE(st.has_value());
    auto now = test::task_tids(pid);
    INFO(fmt::format("nthreads {} (from {}), nlwps {:.4f} ({}/{}); /proc lists {} tasks", st->td.nthreads,
                     st->nthreads_source, st->averages.nlwps.value(), st->averages.nlwps.num,
                     st->averages.nlwps.den, now.size()));
    CHECK(st->nthreads_source == "/proc");
    CHECK(st->td.nthreads == static_cast<int>(now.size()));
    CHECK(st->td.nthreads == n_threads + 1);
    CHECK(st->td.r_concurrency == 0);
    CHECK(st->r_concurrency_source.empty());
    // The averages need no thread library either: N+1 LWPs alive all along.
    CHECK(st->averages.window_seconds >= 0.5);
    CHECK(st->averages.nlwps.value() == doctest::Approx(n_threads + 1).epsilon(0.03));

    s->accounting().rusage_start();
    for (pid_t tid : now) {
        INFO("tid ", tid);
        auto before = read_stat(pid, tid);
        auto ru = s->accounting().rusage_collect(tid_t{tid});
        auto li = s->accounting().lwp_info(tid_t{tid});
        auto after = read_stat(pid, tid);
        REQUIRE(before.has_value());
        REQUIRE(after.has_value());
        REQUIRE_MESSAGE(ru.has_value(), "rusage_collect failed: errno ", ru.error());
        REQUIRE_MESSAGE(li.has_value(), "lwp_info failed: errno ", li.error());
        CHECK(static_cast<std::uint64_t>(ru->ru_minflt) >= before->minflt);
        CHECK(static_cast<std::uint64_t>(ru->ru_minflt) <= after->minflt);
    }
}

void check_cli_attach(const nolib_build& b)
{
    nolib_target target(require_build(b));
    pid_t pid = target.child.pid();
    auto run = run_tdctl_json(pid, evals({"stats enable", "sleep 0.5", "stats show", "rusage start",
                                          "rusage collect all", "lwpinfo all"}));
    auto now = as_set(test::task_tids(pid));
    INFO(b.name, ": ", run.describe());
    REQUIRE(run.result.status.is_success());
    CHECK(run.of_type("error").empty());
    REQUIRE(now == target.tasks);
    auto stats = run.of_type("stats");
    REQUIRE(stats.size() == 1);
    CHECK(stats[0]["nthreads_source"] == "/proc");
    CHECK(stats[0]["nthreads"] == now.size());
    CHECK(stats[0]["enabled"] == true);
    CHECK(stats[0]["nlwps"].get<double>() == doctest::Approx(n_threads + 1).epsilon(0.03));
    // One row per task, each task once.
    auto rows = run.of_type("rusage");
    CHECK(rows.size() == now.size());
    CHECK(tids_of(rows) == now);
    auto li = run.of_type("lwpinfo");
    CHECK(li.size() == now.size());
    CHECK(tids_of(li) == now);
}

void check_cli_launch(const nolib_build& b)
{
    std::string path = require_build(b);
    test::temp_file record("tdctl-stats-nolib");
    // Launched at its entry point, then run until its threads exist (the
    // record's "done" comes after the last one started; checked below). The
    // CLI has no "wait for N threads": 3 s is ample even on a loaded machine.
    auto res = test::run_command({test::tdctl_path(), "--json", "-e", "sleep 3", "-e", "stats show", "-e",
                                  "rusage start", "-e", "rusage collect all", "-e", "lwpinfo all", "-e", "kill", "--",
                                  path, "--record", record.path(), std::to_string(n_threads)},
                                 30000ms);
    INFO(b.name, ": ", res.describe());
    auto records = test::json_lines(res.err);   // a launch with --json: the records are on stderr
    auto of_type = [&](std::string_view type) {
        std::vector<json> out;
        for (const auto& r : records)
            if (r.is_object() && r.value("type", "") == type)
                out.push_back(r);
        return out;
    };
    CHECK(of_type("error").empty());
    auto launched = of_type("launched");
    REQUIRE(launched.size() == 1);
    pid_t pid = launched[0]["pid"].get<pid_t>();
    auto facts = test::read_record(record.path());
    INFO(test::format_record(facts));
    REQUIRE_MESSAGE(test::count_kind(facts, "done") == 1, "the fixture's threads did not all start within 3 s");
    std::set<pid_t> tasks = as_set(test::thread_tids(facts, "parked"));
    tasks.insert(pid);
    REQUIRE(tasks.size() == n_threads + 1);

    auto stats = of_type("stats");
    REQUIRE(stats.size() == 1);
    CHECK(stats[0]["nthreads_source"] == "/proc");
    CHECK(stats[0]["nthreads"] == tasks.size());
    CHECK(tids_of(of_type("rusage")) == tasks);
    CHECK(of_type("rusage").size() == tasks.size());
    CHECK(tids_of(of_type("lwpinfo")) == tasks);
    CHECK(of_type("lwpinfo").size() == tasks.size());
}

TEST_CASE("no thread library, session API: nthreads is the /proc task count; rusage and lwp_info for every task")
{
    test::require_ptrace();
    SUBCASE("static, stripped") { check_api(static_stripped); }
    SUBCASE("musl") { check_api(musl); }
}

TEST_CASE("no thread library, tdctl -p: stats show, rusage collect all and lwpinfo all cover every task")
{
    test::require_ptrace();
    SUBCASE("static, stripped") { check_cli_attach(static_stripped); }
    SUBCASE("musl") { check_cli_attach(musl); }
}

TEST_CASE("no thread library, tdctl -- PROG: the same once the launched program's threads exist")
{
    test::require_ptrace();
    SUBCASE("static, stripped") { check_cli_launch(static_stripped); }
    SUBCASE("musl") { check_cli_launch(musl); }
}

}  // namespace
}  // namespace tdctl::stats_test
