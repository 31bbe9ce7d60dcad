// Regression: the whole process is killed while tdctl holds its threads or
// takes a new thread's first stop. The group's SIGKILL wakes each stopped
// thread from the stop tdctl recorded, and each stops again at its exit
// (PTRACE_EVENT_EXIT), waiting for tdctl.
// - A leader tdctl then resumes (to finish a step-over, to swallow a trap's
//   SIGTRAP) dies, and its end is not reported until every other thread has
//   gone: a wait for the leader's next stop never ended.
// - A new thread killed between its creator's clone event and its own first
//   stop reports its exit stop as that first stop: recorded as an ordinary
//   stop, it was never let go to die while an exec waited for it.
// - A child forked just before tdctl kills the process: its parent's fork
//   event never comes, and the kill restarted the child's first stop,
//   traced, with the trap bytes of its copy of the parent's memory.
//
// The tracer runs in a child process of its own, so that a hang is a failed
// check (the child killed after a bound), not a test that never ends. The
// window between two ptrace requests is opened by hand: this program's own
// ptrace() (below) stands in for the C library's.
#include <doctest/doctest.h>

#include <dlfcn.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cerrno>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>

#include "ptrace/traced_process.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::test;
using namespace std::chrono_literals;

namespace {

// When set: the process whose group the next clone event's
// PTRACE_GETEVENTMSG kills (SIGKILL), returning once the new thread sits at
// its exit stop.
pid_t g_kill_at_clone_event = 0;
// The new thread whose first stop the kill came before.
pid_t g_killed_newborn = 0;

// Whether tid sits at its exit stop (PTRACE_GETSIGINFO, as its tracer).
bool at_exit_stop(pid_t tid)
{
    siginfo_t si{};
    return ::syscall(SYS_ptrace, PTRACE_GETSIGINFO, tid, nullptr, &si) == 0 &&
           si.si_code == (SIGTRAP | (PTRACE_EVENT_EXIT << 8));
}

}  // namespace

// The C library's ptrace(), as its manual describes it (a PEEK request
// returns the word read), with the window above added.
extern "C" long ptrace(enum __ptrace_request request, ...)
{
    va_list ap;
    va_start(ap, request);
    pid_t pid = va_arg(ap, pid_t);
    void* addr = va_arg(ap, void*);
    void* data = va_arg(ap, void*);
    va_end(ap);
    long word = 0;
    const bool peek = request == PTRACE_PEEKTEXT || request == PTRACE_PEEKDATA || request == PTRACE_PEEKUSER;
    long r = ::syscall(SYS_ptrace, request, pid, addr, peek ? &word : data);
    if (r >= 0 && peek) {
        errno = 0;
        return word;
    }
    if (r == 0 && request == PTRACE_GETEVENTMSG && g_kill_at_clone_event != 0) {
        const auto child = static_cast<pid_t>(*static_cast<unsigned long*>(data));
        // Only while the new thread's first stop is still the kernel's: one
        // taken already (it came before its creator's event) is on record.
        siginfo_t pending{};
        const bool stop_pending =
            ::waitid(P_PID, static_cast<id_t>(child), &pending, WSTOPPED | WNOHANG | WNOWAIT | __WALL) == 0 &&
            pending.si_pid == child;
        if (!stop_pending && task_state(g_kill_at_clone_event, child) == 't')
            return r;
        const pid_t target = std::exchange(g_kill_at_clone_event, 0);
        g_killed_newborn = child;
        ::kill(target, SIGKILL);
        for (int tries = 0; tries < 2000 && !at_exit_stop(child); ++tries)
            ::usleep(1000);
    }
    return r;
}

namespace {

constexpr int sleeper_threads = 4;

// Where the C library's function `name` is in process pid: its offset in
// this process's copy of the same file, from the target's first mapping of it.
std::uint64_t libc_function_in(pid_t pid, const char* name)
{
    Dl_info info{};
    void* ours = ::dlsym(RTLD_DEFAULT, name);
    if (ours == nullptr || ::dladdr(ours, &info) == 0)
        return 0;
    const auto offset = reinterpret_cast<std::uint64_t>(ours) - reinterpret_cast<std::uint64_t>(info.dli_fbase);
    std::error_code ec;
    const auto file = std::filesystem::canonical(info.dli_fname, ec);
    for (const mapping& m : proc_maps(pid))
        if (m.offset == 0 && !m.path.empty() && std::filesystem::canonical(m.path, ec) == file)
            return m.start + offset;
    return 0;
}

// The tracer ended with `code` 0 (`legend` says what the others mean), and
// the target by the SIGKILL sent to it.
void check_ends(int code, const char* legend, child_process& target)
{
    CHECK_MESSAGE(code == 0, "tracer: ", code, " (", legend, ")");
    auto status = target.wait_exit(5s);
    REQUIRE(status.has_value());
    CHECK(status->term_signal() == SIGKILL);
}

// The processes whose parent is pid (/proc/N/stat field 4).
std::vector<pid_t> children_of(pid_t pid)
{
    std::vector<pid_t> found;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
        const std::string name = entry.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        auto stat = read_text_file("/proc/" + name + "/stat");
        if (!stat)
            continue;
        auto close = stat->rfind(')');
        if (close == std::string::npos)
            continue;
        int ppid = 0;
        char state = 0;
        if (std::sscanf(stat->c_str() + close + 2, "%c %d", &state, &ppid) == 2 && ppid == pid)
            found.push_back(std::stoi(name));
    }
    return found;
}

// Every task of pid in a ptrace stop ('t'), or gone; false after 5 s.
bool all_in_trace_stop(pid_t pid)
{
    for (int tries = 0; tries < 500; ++tries) {
        bool all = true;
        for (pid_t tid : task_tids(pid))
            if (auto s = task_state(pid, tid); s && *s != 't')
                all = false;
        if (all)
            return true;
        std::this_thread::sleep_for(10ms);
    }
    return false;
}

// Runs `trace` in a child process and waits for it at most `bound`: its
// exit code (0: done), or -1 when it had to be killed.
template <typename Trace>
int run_tracer(Trace trace, std::chrono::milliseconds bound)
{
    pid_t tracer = ::fork();
    REQUIRE(tracer >= 0);
    if (tracer == 0) {
        // No test macros here: only an exit status.
        int code = 3;
        try {
            code = trace();
        } catch (...) {
        }
        ::_exit(code);
    }
    int raw = 0;
    for (auto waited = 0ms; waited < bound; waited += 10ms) {
        if (::waitpid(tracer, &raw, WNOHANG) == tracer)
            return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        std::this_thread::sleep_for(10ms);
    }
    ::kill(tracer, SIGKILL);
    ::waitpid(tracer, &raw, 0);
    return -1;
}

}  // namespace

TEST_SUITE("regressions")
{
    TEST_CASE("the process killed while held, its leader owing a trap's SIGTRAP or in a trap stop of ours: the detach ends")
    {
        // A leader that hit a site just as stop-all interrupted it owes the
        // trap's SIGTRAP (its hit came through the interrupt's stop): the
        // detach resumes it to swallow that signal. One in a trap stop of
        // ours is parked (interrupted and resumed) when the sites are
        // withdrawn, as before each remote call.
        require_ptrace();
        for (bool owes_sigtrap : {true, false}) {
            CAPTURE(owes_sigtrap);
            auto target = child_process::spawn({fixture_path("sleeper"), std::to_string(sleeper_threads)});
            const pid_t pid = target.pid();
            for (int tries = 0; tries < 500 && task_tids(pid).size() < sleeper_threads + 1; ++tries)
                std::this_thread::sleep_for(10ms);
            REQUIRE(task_tids(pid).size() == sleeper_threads + 1);

            int code = run_tracer(
                [pid, owes_sigtrap] {
                    auto process = ptrace::traced_process::attach(pid);  // held
                    ptrace::task* leader = process->tasks().find(tid_t{pid});
                    if (leader == nullptr)
                        return 4;
                    if (owes_sigtrap)
                        leader->sigtrap_owed = true;
                    else
                        leader->note_trap_of_ours();
                    ::kill(pid, SIGKILL);
                    if (!all_in_trace_stop(pid))
                        return 5;
                    if (!owes_sigtrap)
                        process->sites().withdraw_all();
                    process->detach();
                    return 0;
                },
                10s);
            check_ends(code, "-1: it never ended", target);
        }
    }

    TEST_CASE("a new thread killed before its first stop is taken: recorded at its exit stop")
    {
        require_ptrace();
        auto target = child_process::spawn({fixture_path("churn"), "--sequential", "2", "1000000"});
        const pid_t pid = target.pid();
        for (int tries = 0; tries < 500 && task_tids(pid).size() < 3; ++tries)
            std::this_thread::sleep_for(10ms);
        REQUIRE(task_tids(pid).size() >= 3);

        int code = run_tracer(
            [pid] {
                auto process = ptrace::traced_process::attach(pid);
                process->release_all();
                g_kill_at_clone_event = pid;
                for (int i = 0; i < 10000; ++i) {
                    auto ev = process->next_event(5000);
                    if (!ev)
                        return 4;
                    if (ev->kind == ptrace::stop_kind::process_exited)
                        return 5;
                    if (ev->kind != ptrace::stop_kind::thread_created || ev->child.value != g_killed_newborn) {
                        // Its first stop came before its creator's event: the next one.
                        if (ev->kind == ptrace::stop_kind::thread_created)
                            process->resume(ev->child);
                        if (ev->kind != ptrace::stop_kind::thread_exited)
                            process->resume(ev->tid);
                        continue;
                    }
                    const ptrace::task_info* child = process->find(ev->child);
                    if (child == nullptr)
                        return 6;
                    const bool right = child->state() == ptrace::task_state::exit_stopped;
                    process->kill();
                    return right ? 0 : 7;
                }
                return 8;
            },
            20s);
        check_ends(code, "7: the new thread recorded in an ordinary stop; -1: it never ended", target);
    }

    TEST_CASE("a child forked as tdctl kills the process: let go untraced, its bytes its own")
    {
        // sh forks once it reads a line; the subshell then waits for another.
        require_ptrace();
        auto target = child_process::spawn({"/bin/sh", "-c", "read go; (read done)"});
        const pid_t pid = target.pid();
        for (int tries = 0; tries < 500 && task_state(pid, pid) != 'S'; ++tries)
            std::this_thread::sleep_for(2ms);
        const std::uint64_t site = libc_function_in(pid, "_exit");
        REQUIRE(site != 0);
        const auto original = read_proc_mem(pid, site, 1);
        REQUIRE(original.size() == 1);

        int code = run_tracer(
            [&target, pid, site, &original] {
                auto process = ptrace::traced_process::attach(pid);
                // Where a subshell ends; sh itself does not get there first.
                process->sites().add(target_addr{site}, 0);
                process->release_all();
                if (!target.write_stdin("go\n"))
                    return 4;
                // sh forks, and stops at the fork event, which no wait takes.
                std::vector<pid_t> children;
                for (int tries = 0; tries < 1000 && children.empty(); ++tries) {
                    std::this_thread::sleep_for(2ms);
                    children = children_of(pid);
                }
                if (children.empty())
                    return 5;
                std::this_thread::sleep_for(20ms);
                process->kill();
                const pid_t self = ::getpid();
                for (pid_t child : children) {
                    if (tracer_pid(child) == self)
                        return 6;
                    try {
                        if (read_proc_mem(child, site, 1) != original)
                            return 7;
                    } catch (const std::exception&) {
                        // gone
                    }
                }
                return 0;
            },
            20s);
        (void)target.write_stdin("done\n");  // the subshell ends
        check_ends(code, "6: a child left traced; 7: a child with a trap byte", target);
    }
}
