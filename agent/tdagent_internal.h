/* tdagent_internal.h — what the agent's source files share. Hidden symbols
 * only; nothing here is exported. */
#ifndef TDAGENT_INTERNAL_H
#define TDAGENT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <semaphore.h>
#include <signal.h>
#include <time.h>

#include "tdagent_record.h"

#define TDAGENT_EXPORT __attribute__((visibility("default")))
#define TDAGENT_HIDDEN __attribute__((visibility("hidden")))
#define TDAGENT_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- the calling thread's record (thread_lifecycle.c) -------------------
 * Every thread's TLS starts pointing at tdagent_unregistered, a record with
 * report_events permanently 0, so the reporting-off path of every wrapper is
 * one thread-local load, one load of report_events and a branch. */
extern struct tdagent_thread tdagent_unregistered TDAGENT_HIDDEN;
extern __thread struct tdagent_thread *tdagent_self
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

/* Where a thread's TLS points once its exit path ran: report_events stays 0
 * and the thread is never adopted again (TSD destructors, libc's teardown). */
extern struct tdagent_thread tdagent_departed TDAGENT_HIDDEN;

/* Registers the initial thread and resolves the real functions, once. */
void tdagent_ensure_init(void) TDAGENT_HIDDEN;

/* Gives the calling thread, unknown to the agent (it existed before the
 * agent was loaded, or libc started it directly), a record: on the live
 * list, counted, its pthread_t mapped, TD_DEATH at its exit through a TSD
 * destructor. Reports TD_CREATE about it with tdagent_unregistered as the
 * reporter, so a controller that enabled tdagent_unregistered (exported as
 * __tdagent_unknown_thread) enables the new record at that report. Returns
 * the record, or tdagent_unregistered when none can be had. */
struct tdagent_thread *tdagent_adopt(void) TDAGENT_HIDDEN;

/* Set by a controller that streams events (event_rings.c): every thread
 * then takes its wrappers' reporting path. Read through the GOT like every
 * protocol variable: a program linked with the agent that names it holds
 * the one copy (a copy relocation), which a hidden alias would not see. */
extern unsigned char __tdagent_streaming;
/* Its values besides 0 (tdagent.h): a full ring falls back to the usual
 * report, or counts a drop (the low two bits); with TDAGENT_STREAM_WAITS
 * added, a report a ring cannot take waits for room instead of stopping
 * (threads born while streaming have no tracer to stop for). */
#define TDAGENT_STREAM_LOSSLESS 1
#define TDAGENT_STREAM_DROP 2
#define TDAGENT_STREAM_HOW 3
#define TDAGENT_STREAM_WAITS 4

/* What kind of lock a report is about, as a streamed report carries it
 * (the ring entry's lock_kind; tdagent.h). */
enum tdagent_lock_kind {
    TDAGENT_LOCK_NONE = 0,
    TDAGENT_LOCK_MUTEX = 1,
    TDAGENT_LOCK_RWLOCK = 2,
    TDAGENT_LOCK_SPIN = 3,
    TDAGENT_LOCK_SEMAPHORE = 4,
};

/* Whether a wrapper takes its reporting path: the thread's report_events,
 * or a controller streaming events. One thread-local load, one load of the
 * flag and one of a global byte, and a branch, when neither is on. */
static inline int tdagent_reporting(const struct tdagent_thread *self)
{
    return self->report_events | __atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED);
}

/* The record a wrapper reports with once tdagent_reporting() said so: an
 * unknown thread's is tdagent_unregistered, whose flag only a controller
 * turns on, asking for unknown threads to be adopted (streaming alone does
 * not adopt them: they stream nothing). */
extern unsigned char tdagent_controller_gone TDAGENT_HIDDEN;
void tdagent_forget_controller(struct tdagent_thread *self) TDAGENT_HIDDEN;

static inline struct tdagent_thread *tdagent_known_self(struct tdagent_thread *self)
{
    if (TDAGENT_UNLIKELY(__atomic_load_n(&tdagent_controller_gone, __ATOMIC_RELAXED)))
        tdagent_forget_controller(self);
    if (TDAGENT_UNLIKELY(self == &tdagent_unregistered) && self->report_events)
        return tdagent_adopt();
    return self;
}

/* Notes what `self`'s next streamed reports carry: the return address
 * into the caller of the wrapper that reports (`site`), and for a lock the
 * kind and its owner's TID (0 when unknown). The shared records of unknown
 * and departed threads never stream and are not written. */
static inline void tdagent_note_report(struct tdagent_thread *self, void *site, enum tdagent_lock_kind kind,
                                       int32_t owner)
{
    if (self == &tdagent_unregistered || self == &tdagent_departed)
        return;
    self->report_site = site;
    self->report_lock_kind = (uint32_t)kind;
    self->report_lock_owner = owner;
}

/* ---- reporting (event_report.c) ---------------------------------------- */

/* Whether `reporter` reports `event`: report_events on and the event in its
 * own mask or the global mask (the seed's rule). */
int tdagent_event_selected(const struct tdagent_thread *reporter, td_event_e event) TDAGENT_HIDDEN;
/* Selected, or streamed by `reporter` (__tdagent_streaming and the event in
 * __tdagent_stream_events: every known thread, whatever its own flag). */
int tdagent_event_wanted(const struct tdagent_thread *reporter, td_event_e event) TDAGENT_HIDDEN;

/* A waiting stream (TDAGENT_STREAM_WAITS: nothing ever stops for a report)
 * streams `creator`'s TD_CREATE, and its TD_CONCURRENCY or does not report
 * it: the new thread then streams both itself, first thing at its start
 * (tdagent_stream_birth), and nobody waits for anybody. */
int tdagent_streams_births_unheld(const struct tdagent_thread *creator) TDAGENT_HIDDEN;
/* In the new thread `rec`, registered, before its start routine: streams
 * the TD_CREATE (reporter its creator, subject itself, the call site and
 * start routine its creator noted) and TD_CONCURRENCY its creator left to
 * it (rec->stream_birth). Nothing once streaming went off meanwhile. */
void tdagent_stream_birth(struct tdagent_thread *rec) TDAGENT_HIDDEN;

/* Reports `event` with `data` into subject's buffer if `reporter` reports it:
 * fills the buffer (overwriting an unread message), pushes subject on
 * __tdagent_last_event unless its buffer already held a message, and calls
 * the event's reporting function with subject. Async-signal-safe: signals
 * other than the synchronous ones are blocked while it runs. */
void tdagent_report(struct tdagent_thread *reporter, struct tdagent_thread *subject, td_event_e event,
                    void *data) TDAGENT_HIDDEN;

/* The controller that armed reporting is gone when the process has no
 * tracer (/proc/self/status's TracerPid, the leader's, is 0: a thread born
 * while streaming has none of its own, and its controller is alive): then reporting goes
 * off by itself (the streaming flag, the global event mask and the stop
 * flags back to 0, and tdagent_controller_gone set, so that each thread
 * turns its own report_events off at its next wrapper: see
 * tdagent_forget_controller), and a program whose controller was killed
 * runs at full speed. A tracer, or a status that cannot be read: nothing
 * changes. Called when a report found its controller absent (a stale
 * heartbeat, a message no stop consumed); a few system calls, errno kept.
 * Async-signal-safe. */
void tdagent_check_controller(void) TDAGENT_HIDDEN;
/* 1: no tracer (the calling thread's own, /proc/thread-self/status; the
 * process's, /proc/self/status: its leader's); 0: one; -1: unreadable. Raw
 * system calls, async-signal-safe. */
int tdagent_thread_untraced(void) TDAGENT_HIDDEN;
int tdagent_process_untraced(void) TDAGENT_HIDDEN;

/* The reporting functions by td_event_e (NULL for events with none), from
 * event_functions_x86_64.S. */
extern void (*const tdagent_report_functions[16])(struct tdagent_thread *) TDAGENT_HIDDEN;

/* ---- internal lock (lock.c): a futex mutex that never goes through the
 * interposed pthread functions. Not async-signal-safe. */
struct tdagent_lock {
    int word;
};
void tdagent_lock_acquire(struct tdagent_lock *lock) TDAGENT_HIDDEN;
void tdagent_lock_release(struct tdagent_lock *lock) TDAGENT_HIDDEN;
void tdagent_futex_wait(int *word, int expected) TDAGENT_HIDDEN;
void tdagent_futex_wake_all(int *word) TDAGENT_HIDDEN;

/* ---- thread registry (thread_registry.c) -------------------------------
 * Records come from a pool that is never unmapped, so a controller's read of
 * a stale handle never faults. A record is reused only when no owner holds
 * it and its buffer is empty and unlinked (a controller consumed it). */

/* A zeroed record with refs = 2 (the creator and the lifecycle), or NULL. */
struct tdagent_thread *tdagent_registry_alloc(void) TDAGENT_HIDDEN;
/* Drops one owner; the last one returns the record to the pool. */
void tdagent_registry_release(struct tdagent_thread *rec) TDAGENT_HIDDEN;
/* Called by a new thread with tid and pthread set: maps its pthread_t, links
 * it on the live list and counts it (birth_nthreads). */
void tdagent_registry_add_live(struct tdagent_thread *rec) TDAGENT_HIDDEN;
/* Called by the creator once pthread_create returned: maps pthread_t unless
 * the thread did already (or was already reaped). */
void tdagent_registry_publish(struct tdagent_thread *rec, pthread_t thread) TDAGENT_HIDDEN;
/* The record of a mapped pthread_t with an owner reference taken (release
 * it), or NULL. */
struct tdagent_thread *tdagent_registry_find(pthread_t thread) TDAGENT_HIDDEN;
/* Unlinks from the live list and uncounts; returns the new thread count. */
int tdagent_registry_remove_live(struct tdagent_thread *rec) TDAGENT_HIDDEN;
/* Removes the pthread_t mapping (at reap). */
void tdagent_registry_unmap(struct tdagent_thread *rec) TDAGENT_HIDDEN;
/* After fork, in the child: only the calling thread is alive. */
void tdagent_registry_after_fork_child(struct tdagent_thread *self) TDAGENT_HIDDEN;
void tdagent_registry_before_fork(void) TDAGENT_HIDDEN;
void tdagent_registry_after_fork_parent(void) TDAGENT_HIDDEN;

/* ---- the real functions (real_functions.c) ------------------------------
 * Resolved with dlsym(RTLD_NEXT) (dlvsym for the versioned condition
 * variable calls) on first use, before any constructor if need be. */
struct tdagent_real {
    int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    void (*pthread_exit)(void *) __attribute__((noreturn));
    int (*pthread_join)(pthread_t, void **);
    int (*pthread_tryjoin_np)(pthread_t, void **);
    int (*pthread_timedjoin_np)(pthread_t, void **, const struct timespec *);
    int (*pthread_clockjoin_np)(pthread_t, void **, clockid_t, const struct timespec *);
    int (*pthread_detach)(pthread_t);
    int (*pthread_mutex_lock)(pthread_mutex_t *);
    int (*pthread_mutex_trylock)(pthread_mutex_t *);
    int (*pthread_mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
    int (*pthread_mutex_clocklock)(pthread_mutex_t *, clockid_t, const struct timespec *);
    int (*pthread_rwlock_rdlock)(pthread_rwlock_t *);
    int (*pthread_rwlock_wrlock)(pthread_rwlock_t *);
    int (*pthread_rwlock_tryrdlock)(pthread_rwlock_t *);
    int (*pthread_rwlock_trywrlock)(pthread_rwlock_t *);
    int (*pthread_rwlock_timedrdlock)(pthread_rwlock_t *, const struct timespec *);
    int (*pthread_rwlock_timedwrlock)(pthread_rwlock_t *, const struct timespec *);
    int (*pthread_rwlock_clockrdlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
    int (*pthread_rwlock_clockwrlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
    int (*pthread_spin_lock)(pthread_spinlock_t *);
    int (*pthread_spin_trylock)(pthread_spinlock_t *);
    int (*pthread_cond_wait)(pthread_cond_t *, pthread_mutex_t *);
    int (*pthread_cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
    int (*pthread_cond_clockwait)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);
    int (*sem_init)(sem_t *, int, unsigned);
    int (*sem_destroy)(sem_t *);
    int (*sem_post)(sem_t *);
    int (*sem_getvalue)(sem_t *, int *);
    int (*sem_wait)(sem_t *);
    int (*sem_trywait)(sem_t *);
    int (*sem_timedwait)(sem_t *, const struct timespec *);
    int (*sem_clockwait)(sem_t *, clockid_t, const struct timespec *);
    int (*pthread_barrier_wait)(pthread_barrier_t *);
    int (*pthread_setconcurrency)(int);
    int (*pthread_getconcurrency)(void);
    int (*sigaction)(int, const struct sigaction *, struct sigaction *);
    int (*execve)(const char *, char *const[], char *const[]);
    int (*execvpe)(const char *, char *const[], char *const[]);
    int (*execv)(const char *, char *const[]);
    int (*execvp)(const char *, char *const[]);
    int (*fexecve)(int, char *const[], char *const[]);
};
extern struct tdagent_real tdagent_real TDAGENT_HIDDEN;
void tdagent_resolve_real(void) TDAGENT_HIDDEN;

/* ---- signals (signal_wrappers.c) ---------------------------------------- */
/* Sets the thread's mask to "every signal but SIGTRAP, SIGSEGV, SIGBUS,
 * SIGILL, SIGFPE, SIGSYS" with the raw syscall (no asynchronous handler can
 * interleave; a controller's int3 is never raised blocked); restores with
 * tdagent_signals_restore. */
void tdagent_signals_block(sigset_t *old) TDAGENT_HIDDEN;
void tdagent_signals_restore(const sigset_t *old) TDAGENT_HIDDEN;
/* That mask as the kernel's 64-bit sigset. */
uint64_t tdagent_reporting_mask(void) TDAGENT_HIDDEN;
/* Blocks every signal but the synchronous ones for the rest of the calling
 * thread's life (an ending thread: signals it would catch go elsewhere). */
void tdagent_signals_block_for_good(void) TDAGENT_HIDDEN;
/* Sets the calling thread's mask to `mask` (the kernel's 64-bit sigset). */
void tdagent_signals_restore_mask(uint64_t mask) TDAGENT_HIDDEN;
/* Sets the mask to *mask; the controller's queued stop signal is taken on
 * the way out (event_functions_x86_64.S). */
void tdagent_stop_for_report(void (*function)(struct tdagent_thread *), struct tdagent_thread *subject,
                             const uint64_t *mask) TDAGENT_HIDDEN;

/* ---- event rings (event_rings.c) ----------------------------------------
 * Lock-free; async-signal-safe. */
struct tdagent_ring_region;
struct tdagent_ring;
struct tdagent_ring_put_args {
    uint64_t subject;
    uint64_t data;
    int32_t subject_tid;
    int32_t reporter_tid;
    uint32_t event;
    int32_t lock_owner;      /* the entry's fields of the same names (event_rings.c) */
    uint64_t call_site;
    uint64_t start_routine;
    uint32_t lock_kind;
    const char *name; /* 16 bytes: the subject's comm (entry's name), or NULL for none */
};
/* A record's ring once its thread ended (no ring is claimed again). */
#define TDAGENT_RING_RELEASED ((struct tdagent_ring *)1)
/* The events the controller asked to stream (__tdagent_stream_events). */
extern td_thr_events_t __tdagent_stream_events;
/* The region, made on first use; NULL when it cannot be made, or while
 * another thread makes it (in a waiting stream, TDAGENT_STREAM_WAITS, the
 * caller waits for that thread instead, unless it is that thread). */
struct tdagent_ring_region *tdagent_ring_region(void) TDAGENT_HIDDEN;
/* A free ring claimed for the thread `tid`, or NULL (counted) when none is. */
struct tdagent_ring *tdagent_ring_claim(struct tdagent_ring_region *region, pid_t tid) TDAGENT_HIDDEN;
/* The producer's thread ended: the controller frees the ring once drained. */
void tdagent_ring_release(struct tdagent_ring *r) TDAGENT_HIDDEN;
/* Writes one entry, stamped with CLOCK_MONOTONIC. 1 when written; 0 when
 * the ring is full (a drop counted in it when count_drop). Only the ring's
 * owner calls it, never re-entered on one ring (see tdagent_report). */
int tdagent_ring_put(struct tdagent_ring *r, const struct tdagent_ring_put_args *e, int count_drop) TDAGENT_HIDDEN;
/* In a forked child: the inherited region is dropped, streaming is off. */
/* Writes an entry to the region's shared ring (many producers): for a
 * thread with no ring of its own, or one that must not touch it now. 1 when
 * written; 0 when the shared ring is full (counted in the region's no_ring):
 * the caller reports the usual way. Async-signal-safe, re-entrant. */
int tdagent_ring_put_shared(struct tdagent_ring_region *region, const struct tdagent_ring_put_args *e) TDAGENT_HIDDEN;
/* Puts that wait for room in a waiting stream (TDAGENT_STREAM_WAITS): at a
 * full ring the controller is woken (once), and the producer sleeps on the
 * ring's tail (a shared futex on its low half, 1 ms at most; the consumer
 * wakes it when it drains a ring whose `waiting` word is set) until there
 * is room. 1 when written; 0 once streaming went off (the controller ended
 * it, or the process has no tracer any more: looked at every 64 sleeps
 * when the heartbeat is stale); a shared-ring put that gives up
 * is counted in no_ring. */
int tdagent_ring_put_waiting(struct tdagent_ring *r, const struct tdagent_ring_put_args *e) TDAGENT_HIDDEN;
int tdagent_ring_put_shared_waiting(struct tdagent_ring_region *region,
                                    const struct tdagent_ring_put_args *e) TDAGENT_HIDDEN;
/* One sleep of those puts, after a put found the ring full with its tail at
 * `full_tail`: 1 to try again, 0 to give up (streaming went off). `naps`
 * counts the put's sleeps, 0 at the first call. */
int tdagent_ring_wait_room(unsigned *naps, uint64_t *tail, uint32_t *waiting, uint64_t full_tail) TDAGENT_HIDDEN;
void tdagent_rings_after_fork_child(void) TDAGENT_HIDDEN;
/* Before an exec (exec_wrappers.c): in a waiting stream, a thread born
 * untraced asks the controller to seize it (the region's seize_requests,
 * and a wake) and waits until it is traced, up to 2 s, so that its exec
 * comes to the controller as an exec event and not as a process that
 * vanished from under it. A traced thread, or no stream: nothing. errno kept. */
void tdagent_before_exec(void) TDAGENT_HIDDEN;

/* ---- semaphores used as locks (lock_semaphores.c) ---------------------
 * Lock-free; async-signal-safe. */
/* s was initialised to 1, not process-shared: track its holder. */
void tdagent_lock_sem_track(sem_t *s) TDAGENT_HIDDEN;
/* s is destroyed, or is a counter after all: forget it. */
void tdagent_lock_sem_forget(sem_t *s) TDAGENT_HIDDEN;
/* The holder the table names for s (0 none), or -1 when s is not a lock. */
int32_t tdagent_lock_sem_holder(const sem_t *s) TDAGENT_HIDDEN;
/* The calling thread (self) took s. */
void tdagent_lock_sem_taken(sem_t *s, const struct tdagent_thread *self) TDAGENT_HIDDEN;
/* s is about to be posted: no holder. Returns 1 when s is tracked. */
int tdagent_lock_sem_releasing(sem_t *s) TDAGENT_HIDDEN;

/* ---- rusage (thread_rusage.c) ------------------------------------------- */
void tdagent_rusage_init_from_env(void) TDAGENT_HIDDEN;

#endif /* TDAGENT_INTERNAL_H */
