// The one wrapper every ::ptrace request goes through. It logs the request at
// debug level and returns errno instead of throwing, because ESRCH (the task
// vanished) is a normal outcome for a tracer.
#pragma once

#include <sys/ptrace.h>

#include "base/types.hpp"

namespace tdctl::ptrace {

/// Issues ptrace(req, tid, addr, data). Returns 0 on success or the errno
/// value. `result`, if given, receives the call's return value (PEEK requests).
int ptrace_call(__ptrace_request req, tid_t tid, void* addr, void* data, long* result = nullptr);

/// Same, but throws tdctl::error (os) on any failure; `what` names the step.
void ptrace_or_throw(__ptrace_request req, tid_t tid, void* addr, void* data, const char* what);

/// Name of a request ("PTRACE_CONT"), for logs and messages.
const char* request_name(__ptrace_request req);

}  // namespace tdctl::ptrace
