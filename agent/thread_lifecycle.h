/* Shared between thread_lifecycle.c and thread_join.c. */
#ifndef TDAGENT_THREAD_LIFECYCLE_H
#define TDAGENT_THREAD_LIFECYCLE_H

#include "tdagent_internal.h"

/* Marks rec reaped, removes its pthread_t mapping, reports TD_REAP (data =
 * rec) from reporter into reporter's own buffer, and drops the lifecycle's
 * reference. Idempotent. */
void tdagent_reap(struct tdagent_thread *reporter, struct tdagent_thread *rec) TDAGENT_HIDDEN;

#endif
