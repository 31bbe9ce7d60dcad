/* Semaphores used as locks: the last thread that took each one.
 *
 * A semaphore initialised to 1 by sem_init (not process-shared) is a lock as
 * far as a controller can tell: CPython's threading.Lock is one (Python/
 * thread_pthread.h, sem_init(lock, 0, 1)). POSIX semaphores have no owner,
 * so the agent keeps one here: the TID of the thread that took it last and
 * has not posted it since (0: not taken), which a controller reads as the
 * inferred holder for `deadlock` and `locks`. A semaphore posted above 1 is
 * a counter after all, and is forgotten.
 *
 * An open-addressed table in the agent's own memory, never unmapped, of
 * fixed size: a lookup probes at most TDAGENT_LOCK_SEM_PROBES slots from the
 * address's hash, so its cost does not grow with the program's semaphores,
 * and a semaphore that finds no slot there is not tracked (counted in
 * __tdagent_lock_sems_untracked). Keys are written with compare-and-swap;
 * a forgotten slot becomes a tombstone that a later sem_init may take. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tdagent_internal.h"

#define TDAGENT_LOCK_SEMS 4096        /* a power of two */
#define TDAGENT_LOCK_SEM_PROBES 32
#define TDAGENT_LOCK_SEM_EMPTY 0u
#define TDAGENT_LOCK_SEM_TOMBSTONE 1u /* never a semaphore's address (alignment) */

struct tdagent_lock_sem {
    uint64_t sem;   /* the sem_t's address; 0 empty, 1 tombstone */
    int32_t holder; /* TID of the last taker that has not posted; 0 none */
    int32_t pad_;
};

TDAGENT_EXPORT struct tdagent_lock_sem __tdagent_lock_sems[TDAGENT_LOCK_SEMS];
TDAGENT_EXPORT unsigned long __tdagent_lock_sems_untracked;
/* { slots, probes per lookup, bytes per slot, offset of holder }; the slot
 * of address A is probed from ((A >> 3) * __tdagent_lock_sems_hash) >>
 * (64 - log2(slots)), wrapping at the end of the table. */
TDAGENT_EXPORT const uint32_t __tdagent_lock_sems_shape[4] = {
    TDAGENT_LOCK_SEMS, TDAGENT_LOCK_SEM_PROBES, sizeof(struct tdagent_lock_sem),
    offsetof(struct tdagent_lock_sem, holder)};
TDAGENT_EXPORT const uint64_t __tdagent_lock_sems_hash = 0x9e3779b97f4a7c15ull;

static unsigned first_slot(const sem_t *s)
{
    unsigned bits = (unsigned)__builtin_ctz(TDAGENT_LOCK_SEMS);
    return (unsigned)((((uint64_t)(uintptr_t)s >> 3) * __tdagent_lock_sems_hash) >> (64 - bits));
}

static struct tdagent_lock_sem *slot(unsigned first, unsigned i)
{
    return &__tdagent_lock_sems[(first + i) & (TDAGENT_LOCK_SEMS - 1)];
}

static struct tdagent_lock_sem *find(const sem_t *s)
{
    const uint64_t key = (uint64_t)(uintptr_t)s;
    const unsigned first = first_slot(s);
    for (unsigned i = 0; i < TDAGENT_LOCK_SEM_PROBES; ++i) {
        struct tdagent_lock_sem *e = slot(first, i);
        uint64_t k = __atomic_load_n(&e->sem, __ATOMIC_ACQUIRE);
        if (k == key)
            return e;
        if (k == TDAGENT_LOCK_SEM_EMPTY)
            return NULL;
    }
    return NULL;
}

void tdagent_lock_sem_track(sem_t *s)
{
    struct tdagent_lock_sem *e = find(s);
    if (e != NULL) {  /* initialised again */
        __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
        return;
    }
    const uint64_t key = (uint64_t)(uintptr_t)s;
    const unsigned first = first_slot(s);
    for (unsigned i = 0; i < TDAGENT_LOCK_SEM_PROBES; ++i) {
        e = slot(first, i);
        uint64_t k = __atomic_load_n(&e->sem, __ATOMIC_RELAXED);
        if (k != TDAGENT_LOCK_SEM_EMPTY && k != TDAGENT_LOCK_SEM_TOMBSTONE)
            continue;
        __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&e->sem, &k, key, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            return;
    }
    __atomic_add_fetch(&__tdagent_lock_sems_untracked, 1, __ATOMIC_RELAXED);
}

void tdagent_lock_sem_forget(sem_t *s)
{
    struct tdagent_lock_sem *e = find(s);
    if (e == NULL)
        return;
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->sem, (uint64_t)TDAGENT_LOCK_SEM_TOMBSTONE, __ATOMIC_RELEASE);
}

int32_t tdagent_lock_sem_holder(const sem_t *s)
{
    const struct tdagent_lock_sem *e = find(s);
    return e != NULL ? __atomic_load_n(&e->holder, __ATOMIC_RELAXED) : -1;
}

void tdagent_lock_sem_taken(sem_t *s, const struct tdagent_thread *self)
{
    struct tdagent_lock_sem *e = find(s);
    if (e == NULL)
        return;
    pid_t tid = self->tid != 0 ? self->tid : (pid_t)syscall(SYS_gettid);
    __atomic_store_n(&e->holder, tid, __ATOMIC_RELAXED);
}

int tdagent_lock_sem_releasing(sem_t *s)
{
    struct tdagent_lock_sem *e = find(s);
    if (e == NULL)
        return 0;
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    return 1;
}
