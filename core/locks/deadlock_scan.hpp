// `deadlock` without any agent: with every thread of the target held, find
// the threads blocked in a mutex wait (the futex system call, reached from
// glibc's mutex lock path) or in pthread_join, read each mutex's owner and
// each joined thread, and build the wait-for graph
// (core/locks/wait_for_graph.hpp) whose cycles are deadlocks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/types.hpp"
#include "core/stacks/backtrace.hpp"
#include "core/locks/mutex_layout.hpp"
#include "ptrace/registers_x86_64.hpp"

namespace tdctl::core {

class live_target;
class event_stacks;

/// What a thread's innermost frames say it waits in.
enum class wait_site {
    mutex_lock,   ///< a pthread_mutex_*lock path (`__lll_lock_wait`, `__pthread_mutex_lock_full`, ...)
    join,         ///< pthread_join and its timed forms: waits for a thread's end
    semaphore,    ///< sem_wait and its timed forms
    other_sync,   ///< a condition variable, barrier or rwlock
    unknown,      ///< none of these among the first frames
};

/// Looks at the first few frames, innermost first: the first that names a
/// mutex lock function, or another synchronisation object's, decides;
/// futex helpers (`__futex_abstimed_wait*`, `syscall`) and unnamed frames
/// are passed over.
wait_site classify_wait_frames(const std::vector<stack_frame>& frames);

/// A thread stopped inside a blocking futex call: the futex word's address
/// (rdi) and the operation (rsi, FUTEX_CMD_MASK applied: FUTEX_WAIT,
/// FUTEX_LOCK_PI, ...), read from the registers at the stop.
struct futex_call {
    target_addr word;
    int command = 0;
    /// The thread sits in `restart_syscall`: a timed futex wait an earlier
    /// stop interrupted, restarted by the kernel from its own record (the
    /// word and operation are not in the registers any more).
    bool restarted = false;
};

/// The futex call a stopped thread was blocked in: the stop interrupted the
/// `futex` system call (orig_rax is SYS_futex, rax one of the kernel's
/// restart codes), or `restart_syscall` (restarted). std::nullopt for any
/// other state.
std::optional<futex_call> blocked_futex_call(const ptrace::registers& regs);
/// The thread was blocked in some system call when it was stopped.
bool was_blocked_in_syscall(const ptrace::registers& regs);

/// One thread blocked on a mutex, on a semaphore used as a lock
/// (`semaphore`), or in pthread_join (`joined`).
struct mutex_wait {
    tid_t waiter;
    std::string name;                ///< its comm
    target_addr mutex;               ///< the mutex (= its futex word, `__lock`)
    std::string symbol;              ///< the static object there ("" for heap or stack mutexes)
    mutex_kind kind;
    mutex_owner owner;               ///< as the mutex records it (target's PID namespace)
    std::optional<tid_t> owner_lwp;  ///< the owner among the target's LWPs; none when gone
    std::vector<stack_frame> frames; ///< the waiter's stack, innermost first
    /// A PI mutex whose FUTEX_LOCK_PI the kernel refused with EDEADLK (it
    /// saw the cycle): glibc then parks the thread for ever on a futex word
    /// of its own stack, and `mutex` is the PI mutex found among the words
    /// of that stack (the lock call's argument, saved there).
    bool parked_after_edeadlk = false;
    /// A timed wait the kernel restarted (futex_call::restarted): `mutex` is
    /// the locked mutex with waiters found among the words of its stack.
    bool restarted = false;
    /// A pthread_join: the thread it waits for, whose end is what it waits
    /// on; then `owner_lwp` is that thread too, and `mutex`, `symbol`,
    /// `kind` and `owner` are empty. Found from the futex word of the join
    /// (glibc waits on the joined thread's struct pthread `tid` field, which
    /// holds that thread's TID until it exits): the word's value, when it is
    /// the TID of a thread of the target whose thread pointer lies just
    /// below the word.
    std::optional<tid_t> joined;
    /// A semaphore the agent knows as a lock (core/locks/lock_semaphores.hpp):
    /// `mutex` is the semaphore (its futex word), `kind` is empty, and
    /// `owner` its last taker that has not posted it — inferred, since a
    /// semaphore has no owner (owner.source says so).
    bool semaphore = false;
};

/// The whole picture of a held target.
struct deadlock_scan {
    std::size_t threads = 0;           ///< LWPs looked at
    std::vector<mutex_wait> waits;     ///< threads blocked on a mutex, a lock semaphore or in pthread_join, by TID
    std::size_t blocked_other = 0;     ///< blocked in any other system call (condvars, I/O, sleeps...)
    std::size_t running = 0;           ///< not in a system call when stopped
    /// Each deadlock, as indices into `waits`: waits[c[i]]'s owner is
    /// waits[c[i+1]]'s waiter (find_cycles' order).
    std::vector<std::vector<std::size_t>> cycles;
    std::vector<std::string> problems; ///< threads that could not be examined, one line each
};

/// Examines every LWP of `s`, whose threads must all be held (cmd's
/// target_hold). Reads registers and memory only; unwinds (at most
/// `max_frames` frames) only the threads blocked in futex. A semaphore wait
/// is an edge only when the agent is loaded and knows the semaphore as a
/// lock; otherwise it counts in blocked_other.
deadlock_scan scan_for_deadlocks(live_target& target, event_stacks& stacks, int max_frames);

}  // namespace tdctl::core
