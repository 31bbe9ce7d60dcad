// Real programs with libtdagent preloaded: a C++ program built on the
// standard library's threads, and the python3, node and java runtimes. Each
// must run to normal completion; with the in-process controller preloaded
// too (auto mode) the events it counted show the interposition working.
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "tests/support/child_process.hpp"
#include "tests/support/temp_file.hpp"

using namespace tdctl::test;
using namespace std::chrono_literals;

namespace {

std::optional<std::string> find_on_path(const std::string& name)
{
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        if (access(candidate.c_str(), X_OK) == 0)
            return candidate;
    }
    return std::nullopt;
}

struct preloaded_run {
    command_result result;
    std::map<std::string, unsigned long> counts;  // empty without the controller
};

/// Runs argv with the agent preloaded (and the in-process controller after
/// it when `with_controller`), keeping an existing LD_PRELOAD in front.
preloaded_run run_preloaded(const std::vector<std::string>& argv, bool with_controller,
                            std::chrono::milliseconds timeout = 60s)
{
    temp_file counts_file("tdagent-counts");
    std::string preload = TDAGENT_LIBRARY;
    if (with_controller)
        preload += std::string(":") + TDAGENT_INPROC_LIBRARY;
    if (const char* existing = std::getenv("LD_PRELOAD"); existing != nullptr && *existing != '\0')
        preload = std::string(existing) + ":" + preload;
    run_options options;
    options.env.emplace_back("LD_PRELOAD", preload);
    if (with_controller)
        options.env.emplace_back("TDAGENT_INPROC_OUT", counts_file.path());
    preloaded_run run{run_command(argv, timeout, options), {}};
    if (with_controller) {
        std::ifstream f(counts_file.path());
        std::string item;
        while (f >> item) {
            auto eq = item.find('=');
            if (eq != std::string::npos)
                run.counts[item.substr(0, eq)] = std::stoul(item.substr(eq + 1));
        }
    }
    return run;
}

}  // namespace

TEST_CASE("C++ std::thread, std::mutex and std::condition_variable go through the agent")
{
    SUBCASE("the agent alone")
    {
        auto run = run_preloaded({TDAGENT_STD_THREADS_PROGRAM}, false);
        REQUIRE_MESSAGE(run.result.status.is_success(), run.result.describe());
        CHECK(run.result.out == "ok 4\n");
    }
    SUBCASE("with a controller: LOCK_TRY, SLEEP, READY, CREATE, DEATH and REAP")
    {
        auto run = run_preloaded({TDAGENT_STD_THREADS_PROGRAM}, true);
        REQUIRE_MESSAGE(run.result.status.is_success(), run.result.describe());
        CHECK(run.result.out == "ok 4\n");
        REQUIRE_MESSAGE(!run.counts.empty(), run.result.describe());
        CHECK(run.counts["TD_CREATE"] == 4);
        CHECK(run.counts["TD_DEATH"] == 4);
        CHECK(run.counts["TD_REAP"] == 4);
        CHECK(run.counts["TD_LOCK_TRY"] >= 4);  // every worker's first lock was contended
        CHECK(run.counts["TD_SLEEP"] >= 4);
        CHECK(run.counts["TD_READY"] >= 4);
        CHECK(run.counts["TD_CONCURRENCY"] == 8);  // 4 births, 4 deaths
        CHECK(run.counts["TD_SWITCHTO"] == 0);
    }
}

TEST_CASE("python3 with threads runs to completion")
{
    auto python = find_on_path("python3");
    if (!python) {
        FAIL("python3 not on PATH (scripts/setup-debian.sh installs it)");
    }
    // The interpreter itself, not a wrapper script (a pyenv shim) whose own
    // processes would run with the preload too.
    auto where = run_command({*python, "-c", "import sys; print(sys.executable)"}, 30s);
    REQUIRE_MESSAGE(where.status.is_success(), where.describe());
    python = where.out.substr(0, where.out.find('\n'));
    const std::string script = R"(import threading, queue
q = queue.Queue()
lock = threading.Lock()
total = []
def work(n):
    for i in range(200):
        with lock:
            total.append(i)
    q.put(n)
threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print("ok", len(total), sorted(q.get() for _ in range(4)))
)";
    for (bool with_controller : {false, true}) {
        CAPTURE(with_controller);
        auto run = run_preloaded({*python, "-c", script}, with_controller);
        REQUIRE_MESSAGE(run.result.status.is_success(), run.result.describe());
        CHECK(run.result.out == "ok 800 [0, 1, 2, 3]\n");
        if (with_controller) {
            CHECK(run.counts["TD_CREATE"] >= 4);
            CHECK(run.counts["TD_DEATH"] >= 4);
            CHECK(run.counts["TD_REAP"] + run.counts["TD_DEATH"] >= 8);
        }
    }
}

TEST_CASE("node with worker_threads runs to completion")
{
    auto node = find_on_path("node");
    if (!node)
        node = find_on_path("nodejs");
    if (!node) {
        FAIL("node not on PATH (scripts/setup-debian.sh installs nodejs)");
    }
    const std::string script = R"(const { Worker } = require('worker_threads');
let done = 0, sum = 0;
for (let i = 0; i < 2; i++) {
  const w = new Worker('const { parentPort, workerData } = require("worker_threads");' +
                       'let s = 0; for (let k = 0; k <= workerData; k++) s += k; parentPort.postMessage(s);',
                       { eval: true, workerData: 1000 * (i + 1) });
  w.on('message', (s) => { sum += s; });
  w.on('exit', () => { if (++done === 2) console.log('ok', sum); });
}
)";
    for (bool with_controller : {false, true}) {
        CAPTURE(with_controller);
        auto run = run_preloaded({*node, "-e", script}, with_controller);
        REQUIRE_MESSAGE(run.result.status.is_success(), run.result.describe());
        CHECK(run.result.out == "ok 2501500\n");
        if (with_controller) {
            CHECK(run.counts["TD_CREATE"] >= 2);
            CHECK(run.counts["TD_SLEEP"] > 0);
        }
    }
}

TEST_CASE("java with threads runs to completion")
{
    auto java = find_on_path("java");
    auto javac = find_on_path("javac");
    if (!java || !javac) {
        FAIL("java or javac not on PATH (scripts/setup-debian.sh installs openjdk-17-jdk-headless)");
    }
    temp_file dir("tdagent-java");
    REQUIRE(mkdir(dir.path().c_str(), 0700) == 0);
    std::string source = dir.path() + "/Main.java";
    {
        std::ofstream f(source);
        f << R"(public class Main {
    static int counter = 0;
    public static void main(String[] args) throws Exception {
        Thread[] ts = new Thread[4];
        Object lock = new Object();
        for (int i = 0; i < ts.length; i++) {
            ts[i] = new Thread(() -> {
                for (int k = 0; k < 1000; k++) synchronized (lock) { counter++; }
            });
            ts[i].start();
        }
        for (Thread t : ts) t.join();
        System.out.println("ok " + counter);
    }
}
)";
    }
    auto compiled = run_command({*javac, "-d", dir.path(), source}, 120s);
    REQUIRE_MESSAGE(compiled.status.is_success(), compiled.describe());
    for (bool with_controller : {false, true}) {
        CAPTURE(with_controller);
        auto run = run_preloaded({*java, "-Xshare:auto", "-cp", dir.path(), "Main"}, with_controller, 90s);
        REQUIRE_MESSAGE(run.result.status.is_success(), run.result.describe());
        CHECK(run.result.out == "ok 4000\n");
        if (with_controller)
            CHECK(run.counts["TD_CREATE"] >= 4);
    }
    std::remove(source.c_str());
    std::remove((dir.path() + "/Main.class").c_str());
    rmdir(dir.path().c_str());
}
