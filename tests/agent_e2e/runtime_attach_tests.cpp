// `tdctl -p PID --agent -e 'watch all --for 2' -e 'locks --for 2'` on a
// running JVM (/usr/bin/java: threads contending on a `synchronized` block
// and on a ReentrantLock, one starting and joining a thread every 20 ms) and
// a running node (/usr/bin/node: two worker_threads taking turns on an
// Atomics lock, a worker started and ended every 50 ms): the agent is loaded,
// the runtime's pthread calls routed (node's own imports are bound to the
// GLIBC_2.2.5 versions of pthread_create and pthread_join, aliases of
// libc's default ones), lock and thread events reported, `locks` names
// contended locks; after the detach the runtime runs on and every routed
// slot and agent setting is as before. A runtime that is not installed is
// skipped (exit 77) with the reason; each case is its own CTest test.
//
// Tolerances: the events recur every few milliseconds and each command
// lasts two seconds; only "at least one" is asserted per type.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/agent_e2e/agent_memory_snapshot.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;
using namespace std::chrono_literals;

namespace {

constexpr const char* java_source = R"(import java.util.concurrent.locks.ReentrantLock;
public class Contend {
    static final Object monitor = new Object();
    static final ReentrantLock lock = new ReentrantLock();
    static long a, b;
    static void pause(long ms) { try { Thread.sleep(ms); } catch (InterruptedException e) { } }
    static void daemon(Runnable r) { Thread t = new Thread(r); t.setDaemon(true); t.start(); }
    public static void main(String[] args) throws Exception {
        for (int i = 0; i < 2; i++)
            daemon(() -> { while (true) synchronized (monitor) { a++; pause(1); } });
        for (int i = 0; i < 2; i++)
            daemon(() -> { while (true) { lock.lock(); try { b++; pause(1); } finally { lock.unlock(); } } });
        daemon(() -> { while (true) { Thread s = new Thread(() -> { }); s.start();
                                      try { s.join(); } catch (InterruptedException e) { } pause(20); } });
        System.out.println("ready " + ProcessHandle.current().pid());
        while (System.in.read() >= 0) { }
        System.out.println("a=" + a + " b=" + b);
    }
}
)";

constexpr const char* node_script = R"(const { Worker } = require('worker_threads');
const shared = new Int32Array(new SharedArrayBuffer(8));
for (let i = 0; i < 2; i++)
  new Worker(`const a = require('worker_threads').workerData;
    for (;;) {
      while (Atomics.compareExchange(a, 0, 0, 1) !== 0) Atomics.wait(a, 0, 1, 5);
      const t = Date.now(); while (Date.now() - t < 1) {}
      Atomics.store(a, 0, 0); Atomics.notify(a, 0, 1);
    }`, { eval: true, workerData: shared });
let ended = 0;
setInterval(() => {
  const w = new Worker('require("worker_threads").parentPort.postMessage(1)', { eval: true });
  w.on('message', () => w.terminate());
  w.on('exit', () => ++ended);
}, 50);
console.log('ready ' + process.pid);
process.stdin.on('end', () => { console.log('ended ' + ended); process.exit(0); });
process.stdin.resume();
)";

/// A runtime's path, or a skip (exit 77) naming what is missing.
std::string require_runtime(const char* path)
{
    if (access(path, X_OK) != 0)
        test::skip_test(fmt::format("{} is not installed", path));
    return path;
}

pid_t ready_pid(test::child_process& p)
{
    std::istringstream in(p.require_line(60s));
    std::string word;
    pid_t pid = 0;
    in >> word >> pid;
    REQUIRE_MESSAGE(word == "ready", p.stderr_text());
    return pid;
}

/// What one `tdctl --json -p PID --agent -e 'watch all --for 2' [-e 'locks --for 2']` reported.
struct attach_report {
    std::map<std::string, int> events;
    nlohmann::json agent = nlohmann::json::object(), attached = nlohmann::json::object(),
                   locks_report = nlohmann::json::object();
    std::vector<nlohmann::json> locks;
    std::string describe;
};

attach_report attach_watch_locks(pid_t pid, bool with_locks)
{
    test::temp_file out("tdctl-runtime-attach-json");
    std::vector<std::string> argv{test::tdctl_path(), "--json", "-o", out.path(), "-p", std::to_string(pid),
                                  "--agent", "-e", "watch all --for 2"};
    // Stops: a runtime's own pthread mutexes (a JVM's, node's) are seldom
    // contended at full speed, so a streamed `locks` of 2 s found none now
    // and then (java: 0 contentions, after a streamed watch that saw 5
    // TD_LOCK_TRYs); the stop path's stops make the contention this counts.
    if (with_locks)
        argv.insert(argv.end(), {"-e", "locks --for 2 --stop"});
    auto result = test::run_command(argv, 120s);
    attach_report r;
    auto text = test::read_text_file(out.path());
    REQUIRE(text.has_value());
    // The records hold tdctl's errors (-o): the last lines say why it failed.
    r.describe = result.describe() + "\n--- records (end) ---\n" +
                 text->substr(text->size() > 2000 ? text->size() - 2000 : 0);
    // A known limit (README, Limits): a remote call the hijacked thread never
    // returns from (a lock it holds itself) fails the load after 30 s and
    // leaves that thread inside the call. Reported as a skip naming it, not
    // as a pass.
    if (!result.status.is_success() && result.err.find("did not return within") != std::string::npos)
        test::skip_test("the injection's remote call did not return (README Limits: a remote call that does "
                        "not return within 30 s): " +
                        result.err.substr(0, 300));
    REQUIRE_MESSAGE(result.status.is_success(), r.describe);
    for (const auto& rec : test::json_lines(*text)) {
        std::string type = rec.value("type", "");
        if (type == "event")
            ++r.events[rec.value("event", "")];
        else if (type == "agent")
            r.agent = rec;
        else if (type == "attached")
            r.attached = rec;
        else if (type == "locks_report")
            r.locks_report = rec;
        else if (type == "lock")
            r.locks.push_back(rec);
    }
    return r;
}

/// Attaches to the running runtime, checks what came back, then that the
/// detach left every routed slot and agent setting as it was.
void check_attach(pid_t pid, const char* runtime, std::initializer_list<const char*> required, bool with_locks)
{
    auto before = snapshot(pid);
    auto r = attach_watch_locks(pid, with_locks);
    INFO(r.describe);
    std::string counts;
    for (const auto& [e, n] : r.events)
        counts += fmt::format(" {} {}", e, n);
    MESSAGE(fmt::format("{}: agent {} in {:.0f} ms (hijacked thread {:.0f} ms); routed {}; events{}; locks: {} "
                        "contended, {} contentions",
                        runtime, r.agent.value("action", "?"), r.agent.value("ms", 0.0), r.agent.value("hijack_ms", 0.0),
                        r.attached.contains("routed") ? r.attached["routed"].dump() : "-", counts,
                        r.locks_report.value("locks", 0), r.locks_report.value("contentions", 0)));
    CHECK(r.agent.value("action", "") == "loaded");
    CHECK(r.attached.value("backend", "") == "tdagent");
    REQUIRE(r.attached.contains("routed"));
    CHECK(r.attached["routed"].value("slots", 0) > 0);
    for (const char* e : required)
        CHECK_MESSAGE(r.events[e] > 0, "no ", e);
    if (with_locks) {
        CHECK(r.locks_report.value("contentions", 0) > 0);
        CHECK(!r.locks.empty());
    }

    REQUIRE(test::wait_until([&] { return test::tracer_pid(pid) == 0; }, 5000ms));
    std::size_t only_one = 0, bound = 0;
    auto diff = differences(before, snapshot(pid), only_one, bound);
    CHECK_MESSAGE(diff.empty(), diff);
}

}  // namespace

TEST_CASE("java: -p PID --agent loads the agent, reports lock and thread events, locks names locks, all put back")
{
    test::require_ptrace();
    const std::string java = require_runtime("/usr/bin/java");
    test::temp_file dir("tdctl-runtime-attach-java");
    std::filesystem::create_directories(dir.path());
    struct remove_dir {
        std::string path;
        ~remove_dir() { std::filesystem::remove_all(path); }
    } cleanup{dir.path()};
    std::ofstream(dir.path() + "/Contend.java") << java_source;
    // A single-file source launch: no javac needed.
    auto jvm = test::child_process::spawn({java, dir.path() + "/Contend.java"});
    const pid_t pid = ready_pid(jvm);
    // Not TD_LOCK_TRY: the program never tries a lock, the JVM itself does,
    // 1 to 3 times in the 2 s here, none in one run beside the test suite
    // (e2e_trylock tests it); the count is in the message.
    check_attach(pid, "java", {"TD_CREATE", "TD_DEATH", "TD_REAP", "TD_SLEEP", "TD_READY", "TD_TIMEOUT"}, true);
    // The program runs on: its counters grew, and it ends when asked.
    jvm.close_stdin();
    std::string last = jvm.require_line(30s);
    CHECK_MESSAGE(last.starts_with("a="), last);
    CHECK(jvm.require_exit(30s).is_success());
}

TEST_CASE("node: -p PID --agent loads the agent, routes node's pthread calls, reports workers, all put back")
{
    test::require_ptrace();
    const std::string node = require_runtime("/usr/bin/node");
    auto js = test::child_process::spawn({node, "-e", node_script});
    const pid_t pid = ready_pid(js);
    // TD_DEATH is not required: a worker takes 0.5-1 s to start and end
    // here, more than the watch under a load average of 20. `locks` reads
    // waiters' stacks while node's maps change (bt_remap_tests.cpp).
    check_attach(pid, "node", {"TD_CREATE", "TD_LOCK_TRY", "TD_SLEEP", "TD_READY"}, true);
    js.close_stdin();
    std::string last = js.require_line(30s);
    CHECK_MESSAGE(last.starts_with("ended "), last);
    CHECK(js.require_exit(30s).is_success());
}
