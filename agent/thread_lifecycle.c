/* A thread's life as the agent sees it: the initial thread registered at
 * load, pthread_create with the TD_CREATE handshake, the start routine
 * wrapper that reports TD_DEATH on every exit path, pthread_exit and
 * pthread_detach, and reaping (TD_REAP). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <sys/prctl.h>
#include <sys/syscall.h>
#include "tdagent_internal.h"
#include "thread_lifecycle.h"

struct tdagent_thread tdagent_unregistered;
/* The controller's handle on unknown threads: the flag it turns on to have
 * them adopted (the protocol's initial-report flag, SPEC §5). */
extern struct tdagent_thread __tdagent_unknown_thread
    __attribute__((alias("tdagent_unregistered"), visibility("default")));
struct tdagent_thread tdagent_departed = {.death_reported = 1};
__thread struct tdagent_thread *tdagent_self __attribute__((tls_model("initial-exec"))) = &tdagent_unregistered;

/* Creation handshake (record field `phase`). */
enum {
    phase_created = 0,    /* the new thread has not registered yet */
    phase_registered = 1, /* tid set, on the live list, counted */
    phase_released = 2,   /* the creator reported: run the start routine */
};

static int init_state; /* 0: not yet, 1: running, 2: done */
static struct tdagent_lock init_lock;

/* Threads the agent did not start have no start wrapper: their exit path
 * runs from this key's destructor (return, pthread_exit, cancellation). */
static pthread_key_t exit_key;
static int has_exit_key;
static void thread_exit_hook(void *arg);

static void watch_exit(struct tdagent_thread *rec)
{
    if (has_exit_key)
        pthread_setspecific(exit_key, rec);
}

static void before_fork(void)
{
    tdagent_registry_before_fork();
}

static void after_fork_parent(void)
{
    tdagent_registry_after_fork_parent();
}

static void after_fork_child(void)
{
    struct tdagent_thread *self = tdagent_self;
    if (self != &tdagent_unregistered) {
        self->tid = gettid();
        self->ring = NULL;  /* it was in the parent's region */
    }
    tdagent_rings_after_fork_child();
    tdagent_registry_after_fork_child(self);
}

/* The thread that loads the agent (the initial thread, for LD_PRELOAD and
 * linking) is the one thread that exists before it; it gets its record here.
 * A thread that loads the agent with dlopen is registered the same way;
 * other threads that already exist then stay unknown to the agent. */
static void register_initial_thread(void)
{
    struct tdagent_thread *rec = tdagent_registry_alloc();
    if (rec == NULL)
        return;
    rec->refs = 1; /* the lifecycle only; no creator */
    rec->tid = gettid();
    rec->pthread = pthread_self();
    tdagent_registry_add_live(rec);
    tdagent_self = rec;
    watch_exit(rec);
}

/* Whether the calling thread was created detached or detached since. The
 * initial thread is joinable (and pthread_getattr_np would read
 * /proc/self/maps for it). */
static int calling_thread_is_detached(void)
{
    if (gettid() == getpid())
        return 0;
    pthread_attr_t attr;
    int state = PTHREAD_CREATE_JOINABLE;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getdetachstate(&attr, &state);
        pthread_attr_destroy(&attr);
    }
    return state == PTHREAD_CREATE_DETACHED;
}

struct tdagent_thread *tdagent_adopt(void)
{
    tdagent_ensure_init();
    if (tdagent_self != &tdagent_unregistered)
        return tdagent_self; /* the initial registration took this thread */
    struct tdagent_thread *rec = tdagent_registry_alloc();
    if (rec == NULL)
        return &tdagent_unregistered;
    rec->refs = 1; /* the lifecycle only; no creator */
    rec->tid = gettid();
    rec->pthread = pthread_self();
    rec->state = calling_thread_is_detached() ? TDAGENT_DETACHED : TDAGENT_JOINABLE;
    for (int i = 0; i < TD_EVENTSIZE; ++i)
        rec->eventbuf.eventmask.event_bits[i] =
            __atomic_load_n(&tdagent_unregistered.eventbuf.eventmask.event_bits[i], __ATOMIC_RELAXED);
    tdagent_registry_add_live(rec);
    tdagent_self = rec;
    watch_exit(rec);
    /* The controller enables the record at this report, as it does a new
     * thread's at its creator's. */
    tdagent_report(&tdagent_unregistered, rec, TD_CREATE, rec);
    tdagent_report(&tdagent_unregistered, rec, TD_CONCURRENCY, (void *)(intptr_t)rec->birth_nthreads);
    return rec;
}

void tdagent_ensure_init(void)
{
    if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == 2)
        return;
    tdagent_lock_acquire(&init_lock);
    if (init_state == 0) {
        init_state = 1;
        tdagent_resolve_real();
        tdagent_rusage_init_from_env();
        has_exit_key = pthread_key_create(&exit_key, thread_exit_hook) == 0;
        register_initial_thread();
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
        __atomic_store_n(&init_state, 2, __ATOMIC_RELEASE);
    }
    tdagent_lock_release(&init_lock);
}

__attribute__((constructor)) static void tdagent_constructor(void)
{
    tdagent_ensure_init();
}

/* Frees a record whose thread is gone for good, and reports TD_REAP from
 * `reporter` (the joiner, the detacher, or the detached thread itself). */
void tdagent_reap(struct tdagent_thread *reporter, struct tdagent_thread *rec)
{
    if (__atomic_exchange_n(&rec->state, TDAGENT_REAPED, __ATOMIC_ACQ_REL) == TDAGENT_REAPED)
        return;
    if (!rec->death_reported) {
        /* Its exit path never ran (the initial thread joined after ending
         * some other way): take it off the list now. */
        if (rec->list.prev != NULL)
            tdagent_registry_remove_live(rec);
        __atomic_store_n(&rec->tid, 0, __ATOMIC_RELEASE);
    }
    tdagent_registry_unmap(rec);
    tdagent_report(reporter, reporter, TD_REAP, rec);
    tdagent_registry_release(rec);
}

/* Every exit path of a thread ends here, in the thread itself: return from
 * the start routine, pthread_exit, cancellation (the wrapper's cleanup
 * handler), and pthread_exit of the initial thread. */
static void thread_exit_hook(void *arg)
{
    struct tdagent_thread *rec = arg;
    if (rec->death_reported)
        return;
    rec->death_reported = 1;
    /* From its death on, the thread catches no signal it would report: a
     * process-directed one goes to a thread that still reports (the kernel
     * picks one not blocking it), instead of running in a thread tdctl has
     * seen end. glibc blocks them all anyway once the TSD destructors ran. */
    if (tdagent_reporting(rec) && tdagent_event_wanted(rec, TD_CATCHSIG))
        tdagent_signals_block_for_good();
    /* The record may go back to the pool below: the key's destructor must
     * not find it later (a no-op when called from that destructor). */
    if (has_exit_key && !rec->has_trampoline)
        pthread_setspecific(exit_key, NULL);
    rec->exit_name[0] = 0;
    if (TDAGENT_UNLIKELY(__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED)))
        syscall(SYS_prctl, PR_GET_NAME, rec->exit_name, 0L, 0L, 0L);

    tdagent_report(rec, rec, TD_DEATH, rec);
    int n = tdagent_registry_remove_live(rec);
    tdagent_report(rec, rec, TD_CONCURRENCY, (void *)(intptr_t)n);
    /* A thread detached by now is its own reaper, and stays detached (only
     * a joinable state is changed by another thread): its TD_REAP is
     * reported while its TID and ring are still its own, so that a stream
     * takes it as it takes the rest. */
    const int self_reap = __atomic_load_n(&rec->state, __ATOMIC_ACQUIRE) == TDAGENT_DETACHED &&
                          __atomic_exchange_n(&rec->state, TDAGENT_REAPED, __ATOMIC_ACQ_REL) == TDAGENT_DETACHED;
    if (self_reap) {
        tdagent_registry_unmap(rec);
        tdagent_report(rec, rec, TD_REAP, rec);
    }
    if (rec->ring != NULL && rec->ring != TDAGENT_RING_RELEASED)
        tdagent_ring_release(rec->ring);
    rec->ring = TDAGENT_RING_RELEASED;
    __atomic_store_n(&rec->tid, 0, __ATOMIC_RELEASE);
    /* Whatever the thread still runs (TSD destructors, libc's teardown)
     * reports nothing and is never adopted: the record may be reused from
     * here on. */
    tdagent_self = &tdagent_departed;
    if (self_reap) {
        tdagent_registry_release(rec);
        return;
    }

    int expected = TDAGENT_JOINABLE;
    if (__atomic_compare_exchange_n(&rec->state, &expected, TDAGENT_EXITED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return; /* its joiner (or a later pthread_detach) reaps it */
    if (expected == TDAGENT_DETACHED)
        tdagent_reap(rec, rec);
}

/* Whether `attr` gives the new thread its own signal mask (glibc 2.32's
 * pthread_attr_setsigmask_np): then it does not start with its creator's. */
static int has_own_sigmask(const pthread_attr_t *attr)
{
    sigset_t mask;
    return attr != NULL && pthread_attr_getsigmask_np(attr, &mask) != PTHREAD_ATTR_NO_SIGMASK_NP;
}

static void *thread_start(void *arg)
{
    struct tdagent_thread *rec = arg;
    tdagent_self = rec;
    rec->tid = gettid();
    rec->pthread = pthread_self();
    tdagent_registry_add_live(rec);

    __atomic_store_n(&rec->phase, phase_registered, __ATOMIC_RELEASE);
    if (rec->stream_birth)
        tdagent_stream_birth(rec);
    if (rec->hold) {
        tdagent_futex_wake_all(&rec->phase);
        while (__atomic_load_n(&rec->phase, __ATOMIC_ACQUIRE) != phase_released)
            tdagent_futex_wait(&rec->phase, phase_registered);
    }
    /* Its TD_CREATE is out: a signal it catches from here on is reported
     * after it. */
    if (rec->start_masked)
        tdagent_signals_restore_mask(rec->start_sigmask);

    void *result = NULL;
    pthread_cleanup_push(thread_exit_hook, rec);
    result = rec->start_routine(rec->arg);
    pthread_cleanup_pop(1);
    return result;
}

TDAGENT_EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start_routine)(void *),
                                  void *arg)
{
    tdagent_ensure_init();
    struct tdagent_thread *self = tdagent_self;
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        self = tdagent_known_self(self);
    struct tdagent_thread *rec = tdagent_registry_alloc();
    if (rec == NULL)
        return EAGAIN;

    rec->start_routine = start_routine;
    rec->arg = arg;
    rec->has_trampoline = 1;
    /* New threads copy the creator's mask, not its message, and start with
     * reporting disabled. */
    for (int i = 0; i < TD_EVENTSIZE; ++i)
        rec->eventbuf.eventmask.event_bits[i] =
            __atomic_load_n(&self->eventbuf.eventmask.event_bits[i], __ATOMIC_RELAXED);
    int detach_state = PTHREAD_CREATE_JOINABLE;
    if (attr != NULL)
        pthread_attr_getdetachstate(attr, &detach_state);
    rec->state = detach_state == PTHREAD_CREATE_DETACHED ? TDAGENT_DETACHED : TDAGENT_JOINABLE;
    /* Only a creator that will report makes the new thread wait; in a
     * waiting stream the new thread streams its birth itself (its TD_CREATE
     * then precedes its other events in its own ring). */
    rec->stream_birth = 0;
    rec->hold = 0;
    if (self != &tdagent_unregistered && self != &tdagent_departed && tdagent_streams_births_unheld(self)) {
        rec->stream_birth = (unsigned char)(1 | (tdagent_event_wanted(self, TD_CONCURRENCY) ? 2 : 0));
        rec->creator = self;
        rec->creator_tid = self->tid;
        rec->report_site = __builtin_return_address(0);
    } else {
        rec->hold = tdagent_event_wanted(self, TD_CREATE) || tdagent_event_wanted(self, TD_CONCURRENCY);
    }

    /* A signal caught before the new thread registers could not be
     * reported (it has no record yet): when caught signals are reported,
     * the thread starts with them blocked (glibc gives a new thread its
     * creator's mask) and takes the creator's mask once registered. */
    rec->start_masked = 0;
    sigset_t creator_mask;
    if (tdagent_reporting(self) && tdagent_event_wanted(self, TD_CATCHSIG) && !has_own_sigmask(attr)) {
        tdagent_signals_block(&creator_mask);
        memcpy(&rec->start_sigmask, &creator_mask, sizeof rec->start_sigmask);
        rec->start_masked = 1;
    }
    int err = tdagent_real.pthread_create(thread, attr, thread_start, rec);
    if (rec->start_masked)
        tdagent_signals_restore(&creator_mask);
    if (err != 0) {
        rec->refs = 1;
        tdagent_registry_release(rec);
        return err;
    }
    tdagent_registry_publish(rec, *thread);

    if (rec->hold) {
        while (__atomic_load_n(&rec->phase, __ATOMIC_ACQUIRE) == phase_created)
            tdagent_futex_wait(&rec->phase, phase_created);
        /* Registered (tid set, on the list) and held before user code: the
         * controller can enable it at this stop. */
        tdagent_note_report(self, __builtin_return_address(0), TDAGENT_LOCK_NONE, 0);
        tdagent_report(self, rec, TD_CREATE, rec);
        tdagent_report(self, self, TD_CONCURRENCY, (void *)(intptr_t)rec->birth_nthreads);
        __atomic_store_n(&rec->phase, phase_released, __ATOMIC_RELEASE);
        tdagent_futex_wake_all(&rec->phase);
    }
    tdagent_registry_release(rec);
    return 0;
}

TDAGENT_EXPORT void pthread_exit(void *value)
{
    struct tdagent_thread *self = tdagent_self;
    /* Threads the agent started report from their start wrapper's cleanup
     * handler, after the user's own cleanup handlers; the initial thread
     * has no wrapper and reports here. */
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        self = tdagent_known_self(self);
    if (self != &tdagent_unregistered && !self->has_trampoline)
        thread_exit_hook(self);
    tdagent_real.pthread_exit(value);
}

TDAGENT_EXPORT int pthread_detach(pthread_t thread)
{
    struct tdagent_thread *rec = tdagent_registry_find(thread);
    int err = tdagent_real.pthread_detach(thread);
    if (rec != NULL) {
        if (err == 0) {
            int expected = TDAGENT_JOINABLE;
            if (!__atomic_compare_exchange_n(&rec->state, &expected, TDAGENT_DETACHED, 0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE) &&
                expected == TDAGENT_EXITED)
                tdagent_reap(tdagent_self, rec); /* detaching an exited thread reaps it */
        }
        tdagent_registry_release(rec);
    }
    return err;
}
