/* pthread_setconcurrency / pthread_getconcurrency: Linux schedules one LWP
 * per thread, so the level is only a hint glibc stores; the agent keeps the
 * last level in __tdagent_concurrency (SPEC §6 r_concurrency) and reports
 * TD_CONCURRENCY with it. (TD_CONCURRENCY for LWP births and deaths is
 * reported in thread_lifecycle.c.) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>

#include "tdagent_internal.h"

TDAGENT_EXPORT int pthread_setconcurrency(int level)
{
    int err = tdagent_real.pthread_setconcurrency(level);
    if (err == 0) {
        __atomic_store_n(&__tdagent_concurrency, level, __ATOMIC_RELEASE);
        struct tdagent_thread *self = tdagent_self;
        if (TDAGENT_UNLIKELY(tdagent_reporting(self))) {
            self = tdagent_known_self(self);
            tdagent_report(self, self, TD_CONCURRENCY, (void *)(intptr_t)level);
        }
    }
    return err;
}

TDAGENT_EXPORT int pthread_getconcurrency(void)
{
    return tdagent_real.pthread_getconcurrency();
}
