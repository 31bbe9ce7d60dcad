#ifndef TDAGENT_SAFE_COPY_H
#define TDAGENT_SAFE_COPY_H

#include <stddef.h>

#include "tdagent_internal.h"

/* Copies n bytes from src (the agent's memory) to dst (the caller's), with
 * process_vm_writev to this process, or through a pipe where that syscall is
 * not allowed. Returns 0, or EFAULT when dst..dst+n is not all writable (the
 * part before the bad page may have been written). Async-signal-safe. */
int tdagent_copy_out(void *dst, const void *src, size_t n) TDAGENT_HIDDEN;

#endif
