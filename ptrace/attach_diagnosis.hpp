// Why an attach cannot work, in one line a user can act on.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <sys/types.h>

#include "ptrace/procfs.hpp"

namespace tdctl::ptrace {

/// Names another process that is part of tdctl (the guardian that started
/// this tracer): precheck_attach() refuses it as it refuses tdctl itself.
void note_controller_process(pid_t pid);

/// A process between two states an attach cannot meet: its tasks are being
/// killed or are past do_exit (exit_group, a fatal signal), or one of them
/// is inside execve(2) while the kernel kills the others.
enum class process_transition { exiting, execing };

/// Why precheck_attach() refuses: the message, and the transition the
/// process was found in when that is the reason (an exec passes by itself:
/// the caller may try again).
struct attach_refusal {
    std::string why;
    std::optional<process_transition> transition;
};

/// Checks that need no ptrace call: the PID exists, is not tdctl itself, is
/// not a kernel thread, is not already traced, is not exiting or exec'ing
/// with a dead leader. Returns the refusal, or std::nullopt when an attach
/// may be tried.
std::optional<attach_refusal> precheck_attach(pid_t pid);
/// Where precheck_attach() reads /proc/PID/status from (tests give canned
/// answers).
using status_reader = std::function<std::optional<procfs::status_info>(pid_t)>;
/// precheck_attach() reading the status through `read_status`.
std::optional<attach_refusal> precheck_attach(pid_t pid, const status_reader& read_status);
/// Which, when process `pid` is in one now: a task with SIGKILL pending
/// (/proc/PID/task/TID/status SigPnd: exit_group and exec's de_thread add it
/// to every other thread) or with PF_EXITING (stat flags); exec'ing when a
/// task is inside execve or execveat (/proc/PID/task/TID/syscall).
/// std::nullopt otherwise (a leader that called pthread_exit alone is not one).
std::optional<process_transition> process_in_transition(pid_t pid);

/// Explains a failed PTRACE_SEIZE of pid with errno `err`: another user,
/// missing CAP_SYS_PTRACE, Yama ptrace_scope, already traced (naming the
/// tracer from /proc/PID/status TracerPid), or the plain errno text.
std::string explain_seize_failure(pid_t pid, int err);

}  // namespace tdctl::ptrace
