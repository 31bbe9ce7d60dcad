// Making a process ours: seizing one task of a running process, and
// starting a program under trace up to its exec.
#pragma once

#include <cerrno>
#include <string>
#include <vector>

#include <sys/ptrace.h>
#include <sys/types.h>

#include "base/types.hpp"
#include "ptrace/wait_status.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::ptrace {

/// The events every seized task reports.
inline constexpr long trace_options = PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXIT | PTRACE_O_TRACEEXEC |
                                      PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK;

struct launch_options {
    std::vector<std::string> argv;                 ///< argv[0] is looked up in PATH
    std::vector<std::string> extra_env;            ///< "NAME=value", set in the child
    /// A prompt owns the session: a Ctrl-C at the terminal (which also
    /// reaches the program, in tdctl's process group) is the user's
    /// interrupt of tdctl and is not delivered to the program
    /// (terminal_interrupts.hpp).
    bool prompt_takes_interrupts = false;
};

/// PTRACE_SEIZE of task tid of process pid with `options` (trace_options,
/// or those without PTRACE_O_TRACECLONE: birth_tracing.hpp). True when
/// it is ours now; false for a thread (not the leader) that needs no seizing:
/// it died meanwhile, is exiting, or is ours already through its parent's
/// clone event. Throws tdctl::error (os) with one actionable line
/// (attach_diagnosis.hpp) otherwise; while a seize_bound is alive on this
/// thread, tdctl::error (target, exec_under_way) when the seize waited past
/// the bound.
bool seize_task(pid_t pid, tid_t tid, bool is_leader, long options = trace_options);

/// The code of a tdctl::error (target) whose cause passes by itself: an
/// exec under way in the process (attach again once it is done).
inline constexpr int exec_under_way = EAGAIN;

/// While alive, bounds every seize_task() of the thread that made it to
/// 100-200 ms. PTRACE_SEIZE takes the target's cred_guard_mutex, which an
/// exec from one of its threads holds while it waits (the kernel's
/// de_thread) for every other thread to die and be reaped; a thread tdctl
/// traces already dies only when tdctl lets it (its exit stop, its end),
/// and tdctl is in the seize: neither would ever go on (the kernel restarts
/// the seize after any signal: ERESTARTNOINTR). A timer on this thread
/// (timer_create, SIGEV_THREAD_ID, a real-time signal whose handler stays
/// installed) ticks every 100 ms; a seize found in its call by two ticks is
/// left with siglongjmp. Without a timer (timer_create failed) seizes are
/// not bounded. Made around a pass of seizes only: the ticks interrupt
/// other calls of the thread that do not restart (poll, nanosleep).
class seize_bound {
public:
    seize_bound();
    ~seize_bound();
    seize_bound(const seize_bound&) = delete;
    seize_bound& operator=(const seize_bound&) = delete;

private:
    void* timer_ = nullptr;  // a timer_t
    bool armed_ = false;
};

/// A program started under trace, stopped at its exec event.
struct started_program {
    pid_t pid;
    wait_status exec_stop;  ///< the leader's status at PTRACE_EVENT_EXEC
};

/// Forks, seizes the child before it execs opts.argv (with the signal mask
/// and SIGPIPE disposition the program would have had without us), and
/// passes its signals on until its exec event. Throws tdctl::error: usage
/// (no program), os (fork, pipe; cannot trace it: the child is killed and
/// reaped; exec failed: the child's errno), target (it exited first).
started_program start_traced(const launch_options& opts, waiter& wait);

}  // namespace tdctl::ptrace
