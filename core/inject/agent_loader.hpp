// Loading libtdagent.so into a running process (`tdctl -p PID --agent`).
//
// Before anything is changed, the target is checked and refused with a
// reason: a seccomp filter on any thread, no glibc with dlopen (static,
// musl, glibc < 2.34), the dynamic loader in the middle of a change to its
// module list (r_debug.r_state not RT_CONSISTENT after a few tries), an
// agent of another version already loaded. An agent of the same version
// already loaded is reused, not loaded again.
//
// Then one stopped thread is hijacked (ptrace/remote_call.hpp) for a few
// short libc calls while every other thread runs: mmap of two pages,
// memfd_create, and, once the agent's bytes are in the memfd, the loader
// routine in the first page (made read+exec with mprotect) and its block in
// the second (core/inject/agent_loader_routine.hpp), pthread_create. The hijacked
// thread is then restored at once. The new loader thread runs the routine
// (core/inject/agent_loader_x86_64.S): dlopen of the agent (below), close of the
// memfd, `done` set, then a wait while the block's `traced` word is 1;
// tdctl reads the outcome and puts `traced` back to 0, and the routine
// unmaps its pages and ends. It never faults. Every byte written in the
// target goes through the change journal first, and `traced` is journaled:
// put back (detach, time limit, or the guardian after tdctl was killed), it
// makes the routine end alone.
//
// Which file is dlopen()ed, and the agent's name in the target's link map.
// Debuggers and profilers (gdb, lldb, perf, eu-stack, py-spy) read each
// module's l_name from the link map and open that path in their own
// process; so the name must be a path that holds the agent in the target's
// mount namespace (reachable from outside as /proc/PID/root/PATH), or
// plainly no file. Two cases:
// - the target sees the very file tdctl read (agent_path_in_target: the same
//   device and inode at the same path, resolved inside the target's root
//   without following symlinks): the routine dlopen()s that path, and the
//   agent is named, and mapped, as when it is preloaded;
// - otherwise (a container without that file, a path too long), or when
//   that dlopen fails (the target may not read the file, a noexec mount):
//   the routine dlopen()s the memfd as "/proc/self/fd/N" (which works in any
//   mount namespace) and then renames the module in the link map to the
//   memfd's own name as /proc/PID/maps shows it, "/memfd:libtdagent.so
//   (deleted)", no file's path (a copy made with the target's strdup; the
//   old string is left allocated, as another thread may be reading it).
//   Left as "/proc/self/fd/N", the name led each tool to its own descriptor
//   N: gdb blocked reading its own pipe.
// Nothing is ever written into the target's file system. The memfd is made
// in both cases, so that the second dlopen needs nothing more from tdctl.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "base/types.hpp"
#include "ptrace/remote_call.hpp"
#include "ptrace/traced_process.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::core {

/// The agent library as tdctl will hand it over.
struct agent_file {
    std::string path;
    std::vector<std::byte> bytes;
    std::string version;   ///< its __tdagent_version string ("tdagent 1")
    dev_t device = 0;      ///< the file's identity when it was read (fstat)
    ino_t inode = 0;

    /// Reads the file and its version. Throws tdctl::error (os) when it
    /// cannot be read, (target) when it has no __tdagent_version.
    static agent_file read(const std::string& path);
};

/// What load_agent() did.
struct agent_load_report {
    bool reused = false;       ///< an agent of the same version was already loaded
    std::string version;       ///< the agent's __tdagent_version in the target
    tid_t hijacked;            ///< the thread that ran the calls (0 when reused)
    tid_t loader;              ///< the thread that ran dlopen (0 when reused)
    double total_ms = 0;       ///< from the first check to the target held again
    double hijack_ms = 0;      ///< how long the hijacked thread ran for tdctl
    bool hijacked_in_syscall = false;  ///< it had been stopped in a restartable system call
    std::string link_map_name;         ///< the agent's l_name in the target's link map ("" when reused)
};

/// Loads `agent` into the process. Call with every thread held (stop_all);
/// returns with every thread held again. `others` handles every stop of a
/// thread that is not part of the load (the session's handler). `cancel_fd`
/// readable before the loader thread starts: everything is undone and
/// tdctl::error (os, EINTR) thrown. Refusals and failures throw
/// tdctl::error (target) with the reason; nothing is left in the target.
agent_load_report load_agent(ptrace::traced_process& process, const symbols::module_set& modules,
                             const agent_file& agent, const ptrace::other_stop_handler& others, int cancel_fd = -1);

/// The path under which process `pid` sees the very file `agent` was read
/// from: the agent's canonical path in tdctl's mount namespace, when,
/// resolved under /proc/PID/root as the target resolves it (inside its
/// root, no symlink followed: openat2 with RESOLVE_IN_ROOT), it leads to the
/// same device and inode. std::nullopt when it does not (another mount
/// namespace or root without that file, a replaced file, a kernel without
/// openat2) or when the path does not fit in the loader block.
std::optional<std::string> agent_path_in_target(pid_t pid, const agent_file& agent);

/// How fit a stopped thread is to make the load's libc calls (pthread_create
/// takes malloc's and the dynamic loader's locks), 0 best:
///   0  blocked in a system call the kernel restarts, other than futex;
///   1  in a futex wait of FUTEX_WAIT_BITSET (glibc's condition variable,
///      semaphore, join and timed lock waits: nothing of libc held asleep);
///   2  in user code outside libc;
///   3  in another futex wait (a lock of libc's own, maybe inside malloc);
///   4  in user code inside libc (maybe in malloc with its arena locked:
///      pthread_create would wait for the thread itself, as seen on node);
///   5  anything else (a system call that returns EINTR).
/// `syscall_number` is orig_rax (-1 in user code), `futex_op` the futex
/// call's second argument, `restartable` rax holding an -ERESTART* code.
int hijack_rank(long syscall_number, std::uint64_t futex_op, bool restartable, bool pc_in_libc);

/// The `Seccomp:` mode in the text of /proc/PID/task/TID/status (0 none,
/// 1 strict, 2 filter); std::nullopt when the field is absent.
std::optional<int> seccomp_mode_of(std::string_view status_text);

/// The NUL-terminated string an ELF file image holds at virtual address
/// `vaddr` (mapped through its PT_LOAD headers); std::nullopt when outside.
std::optional<std::string> elf_string_at(const std::vector<std::byte>& image, std::uint64_t vaddr);

}  // namespace tdctl::core
