// Why an attach cannot work, in one line a user can act on.
#pragma once

#include <optional>
#include <string>

#include <sys/types.h>

namespace tdctl::ptrace {

/// Names another process that is part of tdctl (the guardian that started
/// this tracer): precheck_attach() refuses it as it refuses tdctl itself.
void note_controller_process(pid_t pid);

/// Checks that need no ptrace call: the PID exists, is not tdctl itself, is
/// not a kernel thread, is not already traced. Returns the message, or
/// std::nullopt when an attach may be tried.
std::optional<std::string> precheck_attach(pid_t pid);

/// Explains a failed PTRACE_SEIZE of pid with errno `err`: another user,
/// missing CAP_SYS_PTRACE, Yama ptrace_scope, already traced (naming the
/// tracer from /proc/PID/status TracerPid), or the plain errno text.
std::string explain_seize_failure(pid_t pid, int err);

}  // namespace tdctl::ptrace
