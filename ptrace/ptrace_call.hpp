// The one wrapper every ::ptrace request goes through (but the bounded
// PTRACE_SEIZE of ptrace/seize.cpp, which logs through log_request()). It
// logs the request at debug level and returns errno instead of throwing,
// because ESRCH (the task vanished) is a normal outcome for a tracer.
#pragma once

#include <sys/ptrace.h>

#include "base/types.hpp"

namespace tdctl::ptrace {

/// Issues ptrace(req, tid, addr, data). Returns 0 on success or the errno
/// value. `result`, if given, receives the call's return value (PEEK requests).
int ptrace_call(__ptrace_request req, tid_t tid, void* addr, void* data, long* result = nullptr);

/// Logs a request made, its return value `r` and errno `err`, at debug level.
void log_request(__ptrace_request req, tid_t tid, void* addr, void* data, long r, int err);

/// Same as ptrace_call(), but throws tdctl::error (os) on any failure; `what` names the step.
void ptrace_or_throw(__ptrace_request req, tid_t tid, void* addr, void* data, const char* what);

/// Name of a request ("PTRACE_CONT"), for logs and messages.
const char* request_name(__ptrace_request req);

/// Stops whose status the kernel still holds for waitpid() although tdctl
/// already read the stop from PTRACE_GETSIGINFO (waiter's peek_stop): `raw`
/// is the status waitpid() will give. The kernel keeps it until the task is
/// resumed, so ptrace_call() forgets a TID at every request that resumes it
/// (CONT, DETACH, SINGLESTEP, SYSCALL, KILL), and the waiter drops that very
/// status if a waitpid() returns it first.
void note_unconsumed_stop(tid_t tid, int raw);

/// True, and forgotten, when `raw` is the unconsumed stop noted for `tid`.
bool take_unconsumed_stop(tid_t tid, int raw);

}  // namespace tdctl::ptrace
