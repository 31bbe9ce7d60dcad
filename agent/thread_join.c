/* The join family. A join that has to wait reports TD_SLEEP before and
 * TD_READY after (data: the joined thread's handle); a join that reaps
 * reports TD_REAP (data: the reaped handle) from the joiner.
 *
 * The record is looked up before the real join: once that returns, glibc may
 * hand the same pthread_t to a new thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>

#include "tdagent_internal.h"
#include "thread_lifecycle.h"

static void *join_object(struct tdagent_thread *rec, pthread_t thread)
{
    return rec != NULL ? (void *)rec : (void *)thread;
}

static int finish_join(struct tdagent_thread *self, struct tdagent_thread *rec, pthread_t thread, int err)
{
    if (rec != NULL) {
        if (err == 0)
            tdagent_reap(self, rec);
        tdagent_registry_release(rec);
    } else if (err == 0) {
        tdagent_report(self, self, TD_REAP, (void *)thread);
    }
    return err;
}

TDAGENT_EXPORT int pthread_join(pthread_t thread, void **value)
{
    struct tdagent_thread *self = tdagent_self;
    struct tdagent_thread *rec = tdagent_registry_find(thread);
    int err;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self))) {
        err = tdagent_real.pthread_join(thread, value);
    } else {
        self = tdagent_known_self(self);
        tdagent_note_report(self, __builtin_return_address(0), TDAGENT_LOCK_NONE, 0);
        err = tdagent_real.pthread_tryjoin_np(thread, value);
        if (err == EBUSY) {
            tdagent_report(self, self, TD_SLEEP, join_object(rec, thread));
            err = tdagent_real.pthread_join(thread, value);
            tdagent_report(self, self, TD_READY, join_object(rec, thread));
        }
    }
    return finish_join(self, rec, thread, err);
}

TDAGENT_EXPORT int pthread_tryjoin_np(pthread_t thread, void **value)
{
    struct tdagent_thread *rec = tdagent_registry_find(thread);
    int err = tdagent_real.pthread_tryjoin_np(thread, value);
    return finish_join(tdagent_self, rec, thread, err);
}

TDAGENT_EXPORT int pthread_timedjoin_np(pthread_t thread, void **value, const struct timespec *abstime)
{
    struct tdagent_thread *self = tdagent_self;
    struct tdagent_thread *rec = tdagent_registry_find(thread);
    int err;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self))) {
        err = tdagent_real.pthread_timedjoin_np(thread, value, abstime);
    } else {
        self = tdagent_known_self(self);
        tdagent_note_report(self, __builtin_return_address(0), TDAGENT_LOCK_NONE, 0);
        err = tdagent_real.pthread_tryjoin_np(thread, value);
        if (err == EBUSY) {
            tdagent_report(self, self, TD_SLEEP, join_object(rec, thread));
            err = tdagent_real.pthread_timedjoin_np(thread, value, abstime);
            tdagent_report(self, self, TD_READY, join_object(rec, thread));
        }
    }
    return finish_join(self, rec, thread, err);
}

TDAGENT_EXPORT int pthread_clockjoin_np(pthread_t thread, void **value, clockid_t clock,
                                        const struct timespec *abstime)
{
    struct tdagent_thread *self = tdagent_self;
    struct tdagent_thread *rec = tdagent_registry_find(thread);
    int err;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self))) {
        err = tdagent_real.pthread_clockjoin_np(thread, value, clock, abstime);
    } else {
        self = tdagent_known_self(self);
        tdagent_note_report(self, __builtin_return_address(0), TDAGENT_LOCK_NONE, 0);
        err = tdagent_real.pthread_tryjoin_np(thread, value);
        if (err == EBUSY) {
            tdagent_report(self, self, TD_SLEEP, join_object(rec, thread));
            err = tdagent_real.pthread_clockjoin_np(thread, value, clock, abstime);
            tdagent_report(self, self, TD_READY, join_object(rec, thread));
        }
    }
    return finish_join(self, rec, thread, err);
}
