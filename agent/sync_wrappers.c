/* Locks, condition variables, semaphores and barriers.
 *
 * Reporting off (the common case), each wrapper costs one thread-local load,
 * one load of report_events (and of the streaming flag) and a branch before
 * forwarding.
 *
 * Reporting on:
 *   locks (mutex, rwlock, spin): a try-lock first; only if the lock is
 *     unavailable: TD_LOCK_TRY, TD_PRI_INHERIT (PTHREAD_PRIO_INHERIT mutexes
 *     only), TD_SLEEP, the real (blocking or timed) call, TD_READY — all
 *     with the lock's address. For a spin lock SLEEP/READY bracket the spin.
 *   pthread_mutex_trylock: the call itself; EBUSY (the mutex is taken) ⇒
 *     TD_LOCK_TRY with the mutex's address and nothing after it — a try
 *     that does not block has no SLEEP, which is how a controller tells a
 *     trylock failure from the first report of a blocking contention.
 *   condition variables: TD_SLEEP, the wait, [TD_TIMEOUT on ETIMEDOUT],
 *     TD_READY — data: the condvar's address.
 *   semaphores: a try-wait first; if it would block: TD_SLEEP, the wait,
 *     TD_READY — data: the semaphore's address.
 *   barriers: TD_SLEEP, the wait, TD_READY — data: the barrier's address
 *     (whether a given arrival blocks cannot be known in advance; the last
 *     one reports a SLEEP/READY pair that did not block). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>

#include "tdagent_internal.h"

/* glibc's mutex kind bit for PTHREAD_PRIO_INHERIT (nptl's
 * PTHREAD_MUTEX_PRIO_INHERIT_NP); there is no public getter for a mutex's
 * protocol, only for an attribute's. */
enum { glibc_mutex_prio_inherit_bit = 32 };

static int is_priority_inheriting(const pthread_mutex_t *m)
{
    return (__atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED) & glibc_mutex_prio_inherit_bit) != 0;
}

/* glibc keeps a mutex's owner TID in __owner (PI and robust mutexes too,
 * with FUTEX_OWNER_DIED and FUTEX_WAITERS above the TID bits). */
static int32_t mutex_owner(const pthread_mutex_t *m)
{
    return __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED) & FUTEX_TID_MASK;
}

static void report_contended_mutex(struct tdagent_thread *self, pthread_mutex_t *m, void *site)
{
    tdagent_note_report(self, site, TDAGENT_LOCK_MUTEX, mutex_owner(m));
    tdagent_report(self, self, TD_LOCK_TRY, m);
    if (is_priority_inheriting(m))
        tdagent_report(self, self, TD_PRI_INHERIT, m);
    tdagent_report(self, self, TD_SLEEP, m);
}

static void report_contended_lock(struct tdagent_thread *self, void *lock, void *site,
                                  enum tdagent_lock_kind kind, int32_t owner)
{
    tdagent_note_report(self, site, kind, owner);
    tdagent_report(self, self, TD_LOCK_TRY, lock);
    tdagent_report(self, self, TD_SLEEP, lock);
}

/* ---- mutexes ------------------------------------------------------------ */

/* An error-checking mutex the caller already owns is no contention: locking
 * it fails with EDEADLK at once and never blocks. */
static int relocks_own_errorcheck_mutex(const struct tdagent_thread *self, const pthread_mutex_t *m)
{
    return (m->__data.__kind & 3) == PTHREAD_MUTEX_ERRORCHECK_NP && m->__data.__owner == self->tid;
}

__attribute__((noinline)) static int mutex_lock_reporting(struct tdagent_thread *self, pthread_mutex_t *m,
                                                          void *site)
{
    int err = tdagent_real.pthread_mutex_trylock(m);
    if (err != EBUSY)
        return err; /* acquired, or an error (EOWNERDEAD acquires too) */
    if (relocks_own_errorcheck_mutex(self, m))
        return tdagent_real.pthread_mutex_lock(m);
    report_contended_mutex(self, m, site);
    err = tdagent_real.pthread_mutex_lock(m);
    tdagent_report(self, self, TD_READY, m);
    return err;
}

TDAGENT_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return mutex_lock_reporting(tdagent_known_self(self), m, __builtin_return_address(0));
    return tdagent_real.pthread_mutex_lock(m);
}

__attribute__((noinline)) static int mutex_trylock_reporting(struct tdagent_thread *self, pthread_mutex_t *m,
                                                             void *site)
{
    int err = tdagent_real.pthread_mutex_trylock(m);
    if (err == EBUSY) {
        tdagent_note_report(self, site, TDAGENT_LOCK_MUTEX, mutex_owner(m));
        tdagent_report(self, self, TD_LOCK_TRY, m);
    }
    return err;
}

TDAGENT_EXPORT int pthread_mutex_trylock(pthread_mutex_t *m)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return mutex_trylock_reporting(tdagent_known_self(self), m, __builtin_return_address(0));
    return tdagent_real.pthread_mutex_trylock(m);
}

TDAGENT_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abstime)
{
    struct tdagent_thread *self = tdagent_self;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return tdagent_real.pthread_mutex_timedlock(m, abstime);
    self = tdagent_known_self(self);
    int err = tdagent_real.pthread_mutex_trylock(m);
    if (err != EBUSY)
        return err;
    if (relocks_own_errorcheck_mutex(self, m))
        return tdagent_real.pthread_mutex_timedlock(m, abstime);
    report_contended_mutex(self, m, __builtin_return_address(0));
    err = tdagent_real.pthread_mutex_timedlock(m, abstime);
    tdagent_report(self, self, TD_READY, m);
    return err;
}

TDAGENT_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clock, const struct timespec *abstime)
{
    struct tdagent_thread *self = tdagent_self;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return tdagent_real.pthread_mutex_clocklock(m, clock, abstime);
    self = tdagent_known_self(self);
    int err = tdagent_real.pthread_mutex_trylock(m);
    if (err != EBUSY)
        return err;
    if (relocks_own_errorcheck_mutex(self, m))
        return tdagent_real.pthread_mutex_clocklock(m, clock, abstime);
    report_contended_mutex(self, m, __builtin_return_address(0));
    err = tdagent_real.pthread_mutex_clocklock(m, clock, abstime);
    tdagent_report(self, self, TD_READY, m);
    return err;
}

/* ---- rwlocks ------------------------------------------------------------ */

/* One body for the six blocking rwlock calls: `kind` picks the call. */
enum rwlock_call { rd, wr, timed_rd, timed_wr, clock_rd, clock_wr };

static int rwlock_forward(enum rwlock_call kind, pthread_rwlock_t *l, clockid_t clock, const struct timespec *t)
{
    switch (kind) {
    case rd: return tdagent_real.pthread_rwlock_rdlock(l);
    case wr: return tdagent_real.pthread_rwlock_wrlock(l);
    case timed_rd: return tdagent_real.pthread_rwlock_timedrdlock(l, t);
    case timed_wr: return tdagent_real.pthread_rwlock_timedwrlock(l, t);
    case clock_rd: return tdagent_real.pthread_rwlock_clockrdlock(l, clock, t);
    case clock_wr: return tdagent_real.pthread_rwlock_clockwrlock(l, clock, t);
    }
    return EINVAL;
}

__attribute__((noinline)) static int rwlock_reporting(struct tdagent_thread *self, enum rwlock_call kind,
                                                      pthread_rwlock_t *l, clockid_t clock,
                                                      const struct timespec *t, void *site)
{
    int is_read = kind == rd || kind == timed_rd || kind == clock_rd;
    int err = is_read ? tdagent_real.pthread_rwlock_tryrdlock(l) : tdagent_real.pthread_rwlock_trywrlock(l);
    if (err != EBUSY)
        return err;
    /* A write-locked rwlock names its writer; readers are not named. */
    report_contended_lock(self, l, site, TDAGENT_LOCK_RWLOCK,
                          __atomic_load_n(&l->__data.__cur_writer, __ATOMIC_RELAXED) & FUTEX_TID_MASK);
    err = rwlock_forward(kind, l, clock, t);
    tdagent_report(self, self, TD_READY, l);
    return err;
}

TDAGENT_EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t *l)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return rwlock_reporting(tdagent_known_self(self), rd, l, 0, NULL, __builtin_return_address(0));
    return tdagent_real.pthread_rwlock_rdlock(l);
}

TDAGENT_EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t *l)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return rwlock_reporting(tdagent_known_self(self), wr, l, 0, NULL, __builtin_return_address(0));
    return tdagent_real.pthread_rwlock_wrlock(l);
}

TDAGENT_EXPORT int pthread_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *t)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return rwlock_reporting(tdagent_known_self(self), timed_rd, l, 0, t, __builtin_return_address(0));
    return tdagent_real.pthread_rwlock_timedrdlock(l, t);
}

TDAGENT_EXPORT int pthread_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *t)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return rwlock_reporting(tdagent_known_self(self), timed_wr, l, 0, t, __builtin_return_address(0));
    return tdagent_real.pthread_rwlock_timedwrlock(l, t);
}

TDAGENT_EXPORT int pthread_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return rwlock_reporting(tdagent_known_self(self), clock_rd, l, c, t, __builtin_return_address(0));
    return tdagent_real.pthread_rwlock_clockrdlock(l, c, t);
}

TDAGENT_EXPORT int pthread_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return rwlock_reporting(tdagent_known_self(self), clock_wr, l, c, t, __builtin_return_address(0));
    return tdagent_real.pthread_rwlock_clockwrlock(l, c, t);
}

/* ---- spin locks --------------------------------------------------------- */

__attribute__((noinline)) static int spin_lock_reporting(struct tdagent_thread *self, pthread_spinlock_t *l,
                                                         void *site)
{
    int err = tdagent_real.pthread_spin_trylock(l);
    if (err != EBUSY)
        return err;
    report_contended_lock(self, (void *)l, site, TDAGENT_LOCK_SPIN, 0);
    err = tdagent_real.pthread_spin_lock(l);
    tdagent_report(self, self, TD_READY, (void *)l);
    return err;
}

TDAGENT_EXPORT int pthread_spin_lock(pthread_spinlock_t *l)
{
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return spin_lock_reporting(tdagent_known_self(self), l, __builtin_return_address(0));
    return tdagent_real.pthread_spin_lock(l);
}

/* ---- condition variables ----------------------------------------------- */

TDAGENT_EXPORT int pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *m)
{
    struct tdagent_thread *self = tdagent_self;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return tdagent_real.pthread_cond_wait(cv, m);
    self = tdagent_known_self(self);
    tdagent_note_report(self, __builtin_return_address(0), TDAGENT_LOCK_NONE, 0);
    tdagent_report(self, self, TD_SLEEP, cv);
    int err = tdagent_real.pthread_cond_wait(cv, m);
    tdagent_report(self, self, TD_READY, cv);
    return err;
}

static int finish_timed_cond_wait(struct tdagent_thread *self, pthread_cond_t *cv, int err)
{
    if (err == ETIMEDOUT)
        tdagent_report(self, self, TD_TIMEOUT, cv);
    tdagent_report(self, self, TD_READY, cv);
    return err;
}

TDAGENT_EXPORT int pthread_cond_timedwait(pthread_cond_t *cv, pthread_mutex_t *m, const struct timespec *abstime)
{
    struct tdagent_thread *self = tdagent_self;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return tdagent_real.pthread_cond_timedwait(cv, m, abstime);
    self = tdagent_known_self(self);
    tdagent_note_report(self, __builtin_return_address(0), TDAGENT_LOCK_NONE, 0);
    tdagent_report(self, self, TD_SLEEP, cv);
    return finish_timed_cond_wait(self, cv, tdagent_real.pthread_cond_timedwait(cv, m, abstime));
}

TDAGENT_EXPORT int pthread_cond_clockwait(pthread_cond_t *cv, pthread_mutex_t *m, clockid_t clock,
                                          const struct timespec *abstime)
{
    struct tdagent_thread *self = tdagent_self;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return tdagent_real.pthread_cond_clockwait(cv, m, clock, abstime);
    self = tdagent_known_self(self);
    tdagent_note_report(self, __builtin_return_address(0), TDAGENT_LOCK_NONE, 0);
    tdagent_report(self, self, TD_SLEEP, cv);
    return finish_timed_cond_wait(self, cv, tdagent_real.pthread_cond_clockwait(cv, m, clock, abstime));
}

/* ---- semaphores ---------------------------------------------------------
 * Every wait reports TD_SLEEP and TD_READY; a semaphore used as a lock
 * (lock_semaphores.c) also reports TD_LOCK_TRY first, as a contended mutex
 * does, and each take of one records the taker as its holder. */

/* The take `r` (0: taken) of s by the calling thread; returns r. */
static int took(sem_t *s, int r)
{
    if (r == 0)
        tdagent_lock_sem_taken(s, tdagent_self);
    return r;
}

/* 1 when the semaphore was taken without blocking; errno is preserved. */
static int sem_try(sem_t *s)
{
    int saved = errno;
    int taken = tdagent_real.sem_trywait(s) == 0;
    errno = saved;
    return taken;
}

/* One body for the three blocking waits: `kind` picks the call. */
enum sem_call { plain, timed, clocked };

static int sem_forward(enum sem_call kind, sem_t *s, clockid_t clock, const struct timespec *t)
{
    switch (kind) {
    case plain: return tdagent_real.sem_wait(s);
    case timed: return tdagent_real.sem_timedwait(s, t);
    case clocked: return tdagent_real.sem_clockwait(s, clock, t);
    }
    errno = EINVAL;
    return -1;
}

static int sem_wait_reported(enum sem_call kind, sem_t *s, clockid_t clock, const struct timespec *t, void *site)
{
    struct tdagent_thread *self = tdagent_self;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return took(s, sem_forward(kind, s, clock, t));
    self = tdagent_known_self(self);
    if (sem_try(s))
        return took(s, 0);
    const int32_t holder = tdagent_lock_sem_holder(s);
    tdagent_note_report(self, site, holder >= 0 ? TDAGENT_LOCK_SEMAPHORE : TDAGENT_LOCK_NONE, holder > 0 ? holder : 0);
    if (holder >= 0)
        tdagent_report(self, self, TD_LOCK_TRY, s);
    tdagent_report(self, self, TD_SLEEP, s);
    int r = took(s, sem_forward(kind, s, clock, t));
    int saved = errno;
    tdagent_report(self, self, TD_READY, s);
    errno = saved;
    return r;
}

TDAGENT_EXPORT int sem_wait(sem_t *s)
{
    return sem_wait_reported(plain, s, 0, NULL, __builtin_return_address(0));
}

TDAGENT_EXPORT int sem_timedwait(sem_t *s, const struct timespec *abstime)
{
    return sem_wait_reported(timed, s, 0, abstime, __builtin_return_address(0));
}

TDAGENT_EXPORT int sem_clockwait(sem_t *s, clockid_t clock, const struct timespec *abstime)
{
    return sem_wait_reported(clocked, s, clock, abstime, __builtin_return_address(0));
}

TDAGENT_EXPORT int sem_trywait(sem_t *s)
{
    return took(s, tdagent_real.sem_trywait(s));
}

TDAGENT_EXPORT int sem_init(sem_t *s, int pshared, unsigned value)
{
    int r = tdagent_real.sem_init(s, pshared, value);
    if (r == 0 && value == 1 && pshared == 0)
        tdagent_lock_sem_track(s);
    else if (r == 0)
        tdagent_lock_sem_forget(s);  /* initialised again, as a counter */
    return r;
}

TDAGENT_EXPORT int sem_destroy(sem_t *s)
{
    tdagent_lock_sem_forget(s);
    return tdagent_real.sem_destroy(s);
}

TDAGENT_EXPORT int sem_post(sem_t *s)
{
    int is_lock = tdagent_lock_sem_releasing(s);
    int r = tdagent_real.sem_post(s);
    if (is_lock && r == 0) {
        /* Posted above 1: a counter, not a lock. */
        int saved = errno, value = 0;
        if (tdagent_real.sem_getvalue(s, &value) == 0 && value > 1)
            tdagent_lock_sem_forget(s);
        errno = saved;
    }
    return r;
}

/* ---- barriers ----------------------------------------------------------- */

TDAGENT_EXPORT int pthread_barrier_wait(pthread_barrier_t *b)
{
    struct tdagent_thread *self = tdagent_self;
    if (!TDAGENT_UNLIKELY(tdagent_reporting(self)))
        return tdagent_real.pthread_barrier_wait(b);
    self = tdagent_known_self(self);
    tdagent_note_report(self, __builtin_return_address(0), TDAGENT_LOCK_NONE, 0);
    tdagent_report(self, self, TD_SLEEP, b);
    int err = tdagent_real.pthread_barrier_wait(b);
    tdagent_report(self, self, TD_READY, b);
    return err;
}
