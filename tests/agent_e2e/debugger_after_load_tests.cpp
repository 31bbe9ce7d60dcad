// A debugger after `tdctl -p PID --agent`: tdctl has detached and left the
// agent loaded, as designed; then `gdb -p PID -batch -ex 'info
// sharedlibrary' -ex 'thread apply all bt'`, bounded by 90 s, must end on its
// own with every thread's stack. gdb reads each module's name from the
// target's link map and opens it in its own process: named
// "/proc/self/fd/N", the agent led gdb to its own descriptor N, where it
// blocked reading its own pipe (not ended even by SIGTERM).
//
// Targets: the C fixture inject_target, /usr/bin/python3 with threads, a
// JVM (java with a few threads), and inject_target in a mount namespace of
// its own: where the agent's directory is hidden under an empty tmpfs, where
// another copy of the agent sits at the agent's path (both: the agent comes
// from a memfd), and where it sees the same files. The agent's name, as gdb
// lists it, must be the agent file tdctl read, found under /proc/PID/root at
// that path (same device and inode), or "/memfd:libtdagent.so (deleted)",
// which is no file there. One CTest test per target; a missing gdb,
// runtime or namespace permission is a skip (77) that says so.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;
using namespace std::chrono_literals;

namespace {

constexpr const char* python_script = R"(import os, sys, threading, time
def spin():
    while True:
        time.sleep(0.005)
lock = threading.Lock()
def take():
    while True:
        with lock:
            time.sleep(0.002)
for f in (spin, take, take):
    threading.Thread(target=f, daemon=True).start()
print("ready", os.getpid(), flush=True)
sys.stdin.read()
)";

constexpr const char* java_source = R"(public class Threads {
    static final Object monitor = new Object();
    static long count;
    static void pause(long ms) { try { Thread.sleep(ms); } catch (InterruptedException e) { } }
    public static void main(String[] args) throws Exception {
        for (int i = 0; i < 3; i++) {
            Thread t = new Thread(() -> { while (true) synchronized (monitor) { count++; pause(2); } });
            t.setDaemon(true);
            t.start();
        }
        System.out.println("ready " + ProcessHandle.current().pid());
        while (System.in.read() >= 0) { }
    }
}
)";

constexpr std::string_view memfd_name = "/memfd:libtdagent.so (deleted)";

std::string require_program(std::string_view name)
{
    auto path = find_on_path(name);
    if (!path)
        test::skip_test(fmt::format("{} is not installed", name));
    return *path;
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

/// `tdctl -p PID --agent --batch -e detach`: the agent loaded; the name tdctl read back.
std::string load_agent(pid_t pid)
{
    auto run = run_tdctl_agent_attached({"detach"}, pid, 120s);
    INFO(describe_run(run));
    REQUIRE(run.result.status.is_success());
    auto agent = run.of_type("agent");
    REQUIRE(agent.size() == 1);
    CHECK(agent[0].value("action", "") == "loaded");
    REQUIRE(test::wait_until([&] { return test::tracer_pid(pid) == 0; }, 5000ms));
    return agent[0].value("link_map_name", "");
}

/// gdb's own account of the process after the load.
struct gdb_view {
    std::string output;
    std::string agent_name;   ///< the agent's line of `info sharedlibrary`, its name
    int threads = 0;          ///< "Thread N (...)" headers of `thread apply all bt`
    int stacks = 0;           ///< of which followed by a frame #0
};

gdb_view run_gdb(pid_t pid)
{
    const std::string gdb = require_program("gdb");
    // 90 s bound: on a hang run_command kills gdb (SIGKILL) and fails the test.
    auto r = test::run_command({gdb, "-nx", "-batch", "-iex", "set debuginfod enabled off", "-iex",
                                "set auto-load off", "-p", std::to_string(pid), "-ex", "info sharedlibrary", "-ex",
                                "thread apply all bt"},
                               90s);
    INFO(r.describe());
    CHECK(r.status.is_success());
    gdb_view v;
    v.output = r.out;
    std::istringstream lines(r.out);
    // "From To Syms-Read Name"; no addresses when gdb could not read the file.
    const std::regex library(R"(^\s*(0x[0-9a-f]+\s+0x[0-9a-f]+\s+)?(Yes|No)( \(\*\))?\s+(.*libtdagent\.so.*)$)");
    bool after_header = false;
    for (std::string line; std::getline(lines, line);) {
        std::smatch m;
        if (std::regex_match(line, m, library)) {
            // "target:PATH": gdb read the file through the target's mount namespace.
            v.agent_name = m[4].str();
            if (v.agent_name.starts_with("target:"))
                v.agent_name.erase(0, 7);
        }
        if (line.starts_with("Thread ") && line.find(" (") != std::string::npos) {
            ++v.threads;
            after_header = true;
        } else if (after_header && line.starts_with("#0 ")) {
            ++v.stacks;
            after_header = false;
        }
    }
    return v;
}

bool same_file(const std::string& a, const std::string& b)
{
    struct stat sa {}, sb {};
    return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/// Loads the agent into `pid`, runs gdb on it, and checks what gdb found.
/// `hidden`: the target cannot see the agent's file.
void check_gdb_after_load(pid_t pid, bool hidden)
{
    require_program("gdb");
    const std::string loaded_as = load_agent(pid);
    const std::string root = fmt::format("/proc/{}/root", pid);
    const std::string agent = std::filesystem::canonical(agent_library()).string();
    gdb_view v = run_gdb(pid);
    INFO(v.output.substr(0, 6000));
    MESSAGE(fmt::format("gdb: {} threads, {} stacks; the agent named {}", v.threads, v.stacks, v.agent_name));
    CHECK(v.threads >= 2);
    CHECK(v.stacks == v.threads);
    CHECK(v.agent_name == loaded_as);
    if (hidden) {
        CHECK(v.agent_name == memfd_name);
        CHECK_FALSE(std::filesystem::exists(root + v.agent_name));
    } else {
        CHECK(v.agent_name == agent);
        CHECK(same_file(root + v.agent_name, agent));
    }
    // gdb detached: the target runs on, untraced, the agent still loaded.
    CHECK(test::wait_until([&] { return test::tracer_pid(pid) == 0; }, 5000ms));
    int agent_mappings = 0;
    for (const auto& m : test::proc_maps(pid))
        agent_mappings += m.path.find("libtdagent.so") != std::string::npos;
    CHECK(agent_mappings > 0);
}

test::child_process start_inject_target(std::vector<std::string> prefix = {})
{
    prefix.push_back(test::fixture_path("inject_target"));
    return test::child_process::spawn(prefix);
}

}  // namespace

TEST_CASE("c: gdb attaches and walks every stack after -p PID --agent, the agent named by its own file")
{
    test::require_ptrace();
    require_program("gdb");
    auto target = start_inject_target();
    const pid_t pid = ready_pid(target);
    check_gdb_after_load(pid, false);
    CHECK(target.ask("check", 10s).starts_with("eintr="));
}

TEST_CASE("python: gdb attaches and walks every stack after -p PID --agent on python3")
{
    test::require_ptrace();
    require_program("gdb");
    const std::string python = "/usr/bin/python3";
    if (::access(python.c_str(), X_OK) != 0)
        test::skip_test(python + " is not installed");
    auto py = test::child_process::spawn({python, "-c", python_script});
    const pid_t pid = ready_pid(py);
    check_gdb_after_load(pid, false);
    py.close_stdin();
    CHECK(py.require_exit(30s).is_success());
}

TEST_CASE("java: gdb attaches and walks every stack after -p PID --agent on a JVM")
{
    test::require_ptrace();
    require_program("gdb");
    const std::string java = "/usr/bin/java";
    if (::access(java.c_str(), X_OK) != 0)
        test::skip_test(java + " is not installed");
    test::temp_directory dir("tdctl-gdb-java");
    std::ofstream(dir.path() + "/Threads.java") << java_source;
    auto jvm = test::child_process::spawn({java, dir.path() + "/Threads.java"});
    const pid_t pid = ready_pid(jvm);
    check_gdb_after_load(pid, false);
    jvm.close_stdin();
    CHECK(jvm.require_exit(30s).is_success());
}

namespace {

/// inject_target run by `unshare --mount` after `setup` (shell commands;
/// "$0" is the agent's directory), exec()ed in place: the fixture keeps the
/// pid of the process spawned. Skips (77) when mounts in a new mount
/// namespace are refused.
test::child_process start_in_mount_namespace(const std::string& setup)
{
    const std::string unshare = require_program("unshare");
    const std::string agent_dir = std::filesystem::canonical(agent_library()).parent_path().string();
    auto probe = test::run_command(
        {unshare, "--mount", "--propagation", "private", "--", "mount", "-t", "tmpfs", "tdctl-probe", agent_dir}, 10s);
    if (!probe.status.is_success())
        test::skip_test("cannot mount a tmpfs in a new mount namespace: " + probe.describe());
    return start_inject_target(
        {unshare, "--mount", "--propagation", "private", "--", "sh", "-c", setup + " && exec \"$1\"", agent_dir});
}

bool in_own_mount_namespace(pid_t pid)
{
    return std::filesystem::read_symlink(fmt::format("/proc/{}/ns/mnt", pid)) !=
           std::filesystem::read_symlink("/proc/self/ns/mnt");
}

}  // namespace

TEST_CASE("hidden: in a mount namespace without the agent's file, the memfd's module is named as no file")
{
    test::require_ptrace();
    require_program("gdb");
    auto target = start_in_mount_namespace("mount -t tmpfs tdctl-hidden \"$0\"");
    const pid_t pid = ready_pid(target);
    REQUIRE(pid == target.pid());
    REQUIRE(in_own_mount_namespace(pid));
    const std::string seen = fmt::format("/proc/{}/root{}", pid, std::filesystem::canonical(agent_library()).string());
    REQUIRE_FALSE(std::filesystem::exists(seen));
    check_gdb_after_load(pid, true);
    CHECK(target.ask("check", 10s).starts_with("eintr="));
}

TEST_CASE("namespace: another file at the agent's path is not loaded; the same file is")
{
    test::require_ptrace();
    require_program("gdb");
    const std::string agent = std::filesystem::canonical(agent_library()).string();
    SUBCASE("a copy of the agent at its path (another inode): loaded from the memfd")
    {
        test::temp_directory copy("tdctl-agent-copy");
        std::filesystem::copy_file(agent, copy.path() + "/libtdagent.so");
        auto target = start_in_mount_namespace("mount --bind " + copy.path() + " \"$0\"");
        const pid_t pid = ready_pid(target);
        REQUIRE(pid == target.pid());
        REQUIRE(in_own_mount_namespace(pid));
        REQUIRE(std::filesystem::exists(fmt::format("/proc/{}/root{}", pid, agent)));
        REQUIRE_FALSE(same_file(fmt::format("/proc/{}/root{}", pid, agent), agent));
        check_gdb_after_load(pid, true);
    }
    SUBCASE("the same files: loaded from its own path")
    {
        auto target = start_in_mount_namespace("true");
        const pid_t pid = ready_pid(target);
        REQUIRE(pid == target.pid());
        REQUIRE(in_own_mount_namespace(pid));
        check_gdb_after_load(pid, false);
    }
}
