// Real language runtimes under `tdctl --agent --json -e 'watch all'`:
// python3 (threads and a contended threading.Lock), node (worker_threads)
// and java (threads and a contended monitor). Each must run to normal
// completion (exit 0, its own output intact) with events flowing, and every
// thread the agent announced must have exactly one TD_CREATE and one
// TD_DEATH (SPEC §9, "nothing lost"). A runtime missing here is skipped
// with a message. What each one raised is printed (MESSAGE).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;

namespace {

std::string event_counts(const tdctl_run& run)
{
    std::map<std::string, int> counts;
    for (const auto& e : run.events)
        ++counts[e.event];
    std::string out;
    for (const auto& [name, n] : counts)
        out += fmt::format("{}{}={}", out.empty() ? "" : " ", name, n);
    return out;
}

/// Normal completion with events flowing, and one CREATE and one DEATH per
/// announced thread.
void check_runtime_run(const tdctl_run& run, std::string_view expected_output, std::size_t min_threads)
{
    INFO(describe_run(run, 30));
    REQUIRE_MESSAGE(run.result.status.is_success(), "tdctl (the runtime's status) did not exit 0");
    CHECK(run.result.out.find(expected_output) != std::string::npos);
    REQUIRE(run.exit.has_value());
    CHECK(run.exit->value("status", -1) == 0);
    REQUIRE(run.watch_end.has_value());
    CHECK(run.watch_end->value("reason", "") == "exit");
    CHECK(run.launched->value("backend", "") == "tdagent");
    CHECK(run.count("TD_CREATE") >= min_threads);
    CHECK(run.count("TD_DEATH") >= min_threads);

    auto [creates, deaths] = run.creates_and_deaths();
    for (const auto& [tid, n] : creates) {
        INFO("thread ", tid);
        CHECK(n == 1);
        CHECK(deaths[tid] == 1);
    }
    for (const auto& [tid, n] : deaths) {
        INFO("thread ", tid);
        CHECK(creates.contains(tid));
    }
}

}  // namespace

TEST_CASE("python3: threads contending for a threading.Lock")
{
    test::require_ptrace();
    auto python = find_on_path("python3");
    if (!python) {
        FAIL("python3 not on PATH (scripts/setup-debian.sh installs it)");
    }
    // A version manager's shim is a shell script that execs the real
    // interpreter; ask it for the interpreter itself.
    auto where = test::run_command({*python, "-c", "import sys; print(sys.executable)"}, 30s);
    REQUIRE(where.status.is_success());
    std::string interpreter = where.out.substr(0, where.out.find('\n'));
    const char* script = R"(
import threading, time
lock = threading.Lock()
count = 0
def work():
    global count
    for _ in range(200):
        with lock:
            count += 1
lock.acquire()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
time.sleep(0.2)   # all four block on the held lock
lock.release()
for t in threads:
    t.join()
print("count", count)
)";
    auto run = run_tdctl_agent({"watch all"}, {interpreter, "-c", script}, 120s);
    MESSAGE("python3 (", interpreter, "): ", event_counts(run));
    check_runtime_run(run, "count 800", 4);
    // CPython's Lock is a semaphore: the blocked acquires sleep and wake.
    CHECK(run.count("TD_SLEEP") >= 4);
    CHECK(run.count("TD_READY") >= 4);
    // CPython's threads are detached and reap themselves at their very end;
    // Thread.join() returns before that, so a thread still on its way out
    // when the interpreter exits is ended by exit_group: its TD_DEATH comes
    // from tdctl (the exit stop) and it has no TD_REAP.
    CHECK(run.count("TD_REAP") <= 4);
}

TEST_CASE("node: worker_threads")
{
    test::require_ptrace();
    auto node = find_on_path("node");
    if (!node)
        node = find_on_path("nodejs");
    if (!node) {
        FAIL("node not on PATH (scripts/setup-debian.sh installs nodejs)");
    }
    const char* script = R"(
const { Worker } = require('worker_threads');
let done = 0;
for (let i = 0; i < 3; i++) {
  const w = new Worker(`
    const { parentPort } = require('worker_threads');
    let s = 0; for (let k = 0; k < 1e6; k++) s += k;
    parentPort.postMessage(s);`, { eval: true });
  w.on('message', () => {});
  w.on('exit', () => { if (++done === 3) console.log('workers done'); });
}
)";
    auto run = run_tdctl_agent({"watch all"}, {*node, "-e", script}, 120s);
    MESSAGE("node (", *node, "): ", event_counts(run));
    check_runtime_run(run, "workers done", 3);
}

TEST_CASE("java: threads contending for a monitor")
{
    test::require_ptrace();
    auto java = find_on_path("java");
    auto javac = find_on_path("javac");
    if (!java || !javac) {
        FAIL("java or javac not on PATH (scripts/setup-debian.sh installs openjdk-17-jdk-headless)");
    }
    test::temp_file dir("tdctl-agent-e2e-java");
    std::filesystem::create_directories(dir.path());
    struct remove_dir {
        std::string path;
        ~remove_dir() { std::filesystem::remove_all(path); }
    } cleanup{dir.path()};
    {
        std::ofstream src(dir.path() + "/Main.java");
        src << R"(public class Main {
    static int counter = 0;
    public static void main(String[] args) throws Exception {
        final Object lock = new Object();
        Thread[] ts = new Thread[3];
        for (int i = 0; i < ts.length; i++) {
            ts[i] = new Thread(() -> { for (int k = 0; k < 100000; k++) synchronized (lock) { counter++; } });
            ts[i].start();
        }
        for (Thread t : ts) t.join();
        System.out.println("counter " + counter);
    }
}
)";
    }
    auto compiled = test::run_command({*javac, "-d", dir.path(), dir.path() + "/Main.java"}, 120s);
    REQUIRE_MESSAGE(compiled.status.is_success(), compiled.describe());
    auto run = run_tdctl_agent({"watch all"}, {*java, "-cp", dir.path(), "Main"}, 200s);
    MESSAGE("java (", *java, "): ", event_counts(run));
    check_runtime_run(run, "counter 300000", 3);
}
