/* The protocol's variables and descriptors, and the one function that
 * reports an event (the seed's rule, glibc's CAS push). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tdagent_internal.h"

TDAGENT_EXPORT const char __tdagent_version[] = "tdagent 1";

TDAGENT_EXPORT td_thr_events_t __tdagent_threads_events;
TDAGENT_EXPORT struct tdagent_thread *__tdagent_last_event;
TDAGENT_EXPORT struct tdagent_list __tdagent_thread_list = {&__tdagent_thread_list, &__tdagent_thread_list};
TDAGENT_EXPORT int __tdagent_nthreads;
TDAGENT_EXPORT int __tdagent_concurrency;
/* Per td_event_e: 0, or the signal a report of that event raises to stop
 * this thread for a controller (written by the controller; see
 * tdagent_stop_for_report). */
TDAGENT_EXPORT unsigned char __tdagent_stop_signals[16];

/* Descriptors in glibc's format (nptl_db's structs.def): a scalar or struct
 * member is { sizeof * 8, 1, offset }, an array { element bits, count,
 * offset }. */
#define MEMBER_SIZE(type, member) (sizeof(((type *)0)->member))
#define DB_FIELD(name, type, member) \
    TDAGENT_EXPORT const uint32_t _tdagent_db_##name[3] = {MEMBER_SIZE(type, member) * 8, 1, offsetof(type, member)}
#define DB_ARRAY_FIELD(name, type, member)                                                       \
    TDAGENT_EXPORT const uint32_t _tdagent_db_##name[3] = {MEMBER_SIZE(type, member[0]) * 8,   \
                                                           MEMBER_SIZE(type, member) /         \
                                                               MEMBER_SIZE(type, member[0]),   \
                                                           offsetof(type, member)}
#define DB_SIZEOF(name, type) TDAGENT_EXPORT const uint32_t _tdagent_db_sizeof_##name = sizeof(type)

DB_FIELD(pthread_report_events, struct tdagent_thread, report_events);
DB_FIELD(pthread_eventbuf, struct tdagent_thread, eventbuf);
DB_FIELD(pthread_eventbuf_eventmask, struct tdagent_thread, eventbuf.eventmask);
DB_ARRAY_FIELD(pthread_eventbuf_eventmask_event_bits, struct tdagent_thread, eventbuf.eventmask.event_bits);
DB_FIELD(td_eventbuf_t_eventnum, td_eventbuf_t, eventnum);
DB_FIELD(td_eventbuf_t_eventdata, td_eventbuf_t, eventdata);
DB_ARRAY_FIELD(td_thr_events_t_event_bits, td_thr_events_t, event_bits);
DB_FIELD(pthread_nextevent, struct tdagent_thread, nextevent);
DB_FIELD(pthread_tid, struct tdagent_thread, tid);
DB_FIELD(pthread_start_routine, struct tdagent_thread, start_routine);
DB_FIELD(pthread_list, struct tdagent_thread, list);
DB_FIELD(list_t_next, struct tdagent_list, next);
DB_FIELD(list_t_prev, struct tdagent_list, prev);
DB_SIZEOF(pthread, struct tdagent_thread);
DB_SIZEOF(td_eventbuf_t, td_eventbuf_t);
DB_SIZEOF(td_thr_events_t, td_thr_events_t);
DB_SIZEOF(list_t, struct tdagent_list);

int tdagent_event_selected(const struct tdagent_thread *reporter, td_event_e event)
{
    if (!reporter->report_events || event < TD_MIN_EVENT_NUM || event > TD_MAX_EVENT_NUM)
        return 0;
    uint32_t word = __td_eventword(event);
    uint32_t bit = __td_eventmask(event);
    uint32_t global = __atomic_load_n(&__tdagent_threads_events.event_bits[word], __ATOMIC_RELAXED);
    uint32_t own = __atomic_load_n(&reporter->eventbuf.eventmask.event_bits[word], __ATOMIC_RELAXED);
    return ((global | own) & bit) != 0;
}

static void push_on_last_event(struct tdagent_thread *subject)
{
    struct tdagent_thread *head = __atomic_load_n(&__tdagent_last_event, __ATOMIC_RELAXED);
    do
        __atomic_store_n(&subject->nextevent, head, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&__tdagent_last_event, &head, subject, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
}

/* Queues sig for this thread (every signal is blocked here), then lets the
 * stub unblock it alone: the stop comes at a known pc. A thread with no
 * tracer (the controller was killed before it put the flag back) takes the
 * signal's disposition, "ignore": nothing happens. */
static void stop_with_signal(void (*function)(struct tdagent_thread *), struct tdagent_thread *subject, int sig)
{
    long pid = syscall(SYS_getpid);
    long tid = syscall(SYS_gettid);
    /* sigqueue-style, its value the address of the stop flags: a controller
     * tells this signal from one of the same number the program was sent. */
    siginfo_t info;
    memset(&info, 0, sizeof info);
    info.si_signo = sig;
    info.si_code = SI_QUEUE;
    info.si_pid = (pid_t)pid;
    info.si_value.sival_ptr = (void *)__tdagent_stop_signals;
    if (syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &info) != 0)
        return;
    uint64_t mask = tdagent_reporting_mask() & ~((uint64_t)1 << (sig - 1));
    tdagent_stop_for_report(function, subject, &mask);
}

/* 1: the task of `path` (a status file) has no tracer; 0: it has one; -1:
 * its status cannot be read. Raw system calls only (a report may run in a
 * signal handler). */
static int untraced_at(const char *path)
{
    char buf[2048];
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    for (long n; got < sizeof buf - 1; got += (size_t)n)
        if ((n = syscall(SYS_read, fd, buf + got, sizeof buf - 1 - got)) <= 0)
            break;
    syscall(SYS_close, fd);
    buf[got] = 0;
    const char *field = strstr(buf, "\nTracerPid:");
    if (field == NULL)
        return -1;
    const char *p = field + sizeof "\nTracerPid:" - 1;
    while (*p == ' ' || *p == '\t')
        ++p;
    if (*p < '0' || *p > '9')
        return -1;
    return *p == '0' ? 1 : 0;
}

int tdagent_thread_untraced(void)
{
    return untraced_at("/proc/thread-self/status");
}

/* The process's (its leader's) tracer, not this thread's: a thread born
 * while streaming is untraced with its controller alive. */
int tdagent_process_untraced(void)
{
    return untraced_at("/proc/self/status");
}

static int untraced(void)
{
    return tdagent_process_untraced();
}

unsigned char tdagent_controller_gone;

void tdagent_check_controller(void)
{
    const int saved = errno;
    if (untraced() == 1) {
        __atomic_store_n(&__tdagent_streaming, 0, __ATOMIC_RELAXED);
        for (size_t i = 0; i < sizeof __tdagent_threads_events.event_bits / sizeof *__tdagent_threads_events.event_bits;
             ++i)
            __atomic_store_n(&__tdagent_threads_events.event_bits[i], 0, __ATOMIC_RELAXED);
        for (size_t i = 0; i < sizeof __tdagent_stop_signals; ++i)
            __atomic_store_n(&__tdagent_stop_signals[i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&tdagent_controller_gone, 1, __ATOMIC_RELAXED);
    }
    errno = saved;
}

/* A thread's reporting path after tdagent_check_controller found no
 * tracer: the thread turns its own flag off (only it writes it while no
 * controller is there), so its wrappers take their fast path again. A
 * tracer now (a new session): the flag is left as it is and the hint goes;
 * one that came between the look and the write gets the flag back as it
 * was. */
void tdagent_forget_controller(struct tdagent_thread *self)
{
    const int saved = errno;
    const unsigned char was = __atomic_load_n(&self->report_events, __ATOMIC_RELAXED);
    if (untraced() == 1) {
        __atomic_store_n(&self->report_events, 0, __ATOMIC_RELAXED);
        if (untraced() != 1)
            __atomic_store_n(&self->report_events, was, __ATOMIC_RELAXED);
    } else {
        __atomic_store_n(&tdagent_controller_gone, 0, __ATOMIC_RELAXED);
    }
    errno = saved;
}

/* The controller streams `event` and `reporter` is a known thread. */
static int stream_selected(const struct tdagent_thread *reporter, td_event_e event)
{
    if (!__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) || event < TD_MIN_EVENT_NUM ||
        event > TD_MAX_EVENT_NUM || reporter == &tdagent_unregistered || reporter == &tdagent_departed)
        return 0;
    uint32_t streamed = __atomic_load_n(&__tdagent_stream_events.event_bits[__td_eventword(event)], __ATOMIC_RELAXED);
    return (streamed & __td_eventmask(event)) != 0;
}

int tdagent_event_wanted(const struct tdagent_thread *reporter, td_event_e event)
{
    return tdagent_event_selected(reporter, event) || stream_selected(reporter, event);
}

/* What the entry carries besides the message: the call site noted by the
 * wrapper that reports a wait, a lock event or TD_CREATE, the lock's kind
 * and owner for a lock event, the start routine for TD_CREATE. */
static void note_context(struct tdagent_ring_put_args *entry, const struct tdagent_thread *reporter,
                         const struct tdagent_thread *subject, td_event_e event)
{
    switch (event) {
    case TD_LOCK_TRY:
    case TD_SLEEP:
    case TD_READY:
    case TD_PRI_INHERIT:
    case TD_TIMEOUT:
        entry->lock_kind = reporter->report_lock_kind;
        entry->lock_owner = reporter->report_lock_owner;
        entry->call_site = (uint64_t)(uintptr_t)reporter->report_site;
        break;
    case TD_CREATE:
        entry->call_site = (uint64_t)(uintptr_t)reporter->report_site;
        entry->start_routine = (uint64_t)(uintptr_t)subject->start_routine;
        break;
    default: break;
    }
    /* A thread's reports at its end carry its name: it may be gone when the
     * controller drains. */
    if (subject == reporter && reporter->death_reported && reporter->exit_name[0] != 0)
        entry->name = reporter->exit_name;
}

/* Writes `entry` to the region's shared ring; in a waiting stream, waits
 * for room as long as the stream goes on. */
static int put_shared(struct tdagent_ring_region *region, const struct tdagent_ring_put_args *entry,
                      unsigned mode)
{
    return (mode & TDAGENT_STREAM_WAITS) ? tdagent_ring_put_shared_waiting(region, entry)
                                          : tdagent_ring_put_shared(region, entry);
}

/* Writes `entry` to `producer`'s ring (the calling thread's own record): 1
 * when written, or counted as dropped in drop mode (no stop, no buffer); 0
 * to report the usual way (a full ring in lossless mode, or no ring of its
 * own and a full shared ring). A thread with no ring of its own (none free,
 * its ring released at its end, or a signal handler that interrupted this
 * thread's own put: one producer per ring, never re-entered) writes to the
 * shared ring. In a waiting stream (TDAGENT_STREAM_WAITS) a full ring is
 * waited on instead: 0 only once streaming went off meanwhile. */
static int stream_entry(struct tdagent_thread *producer, const struct tdagent_ring_put_args *entry)
{
    const unsigned mode = __atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED);
    if (producer->ring == TDAGENT_RING_RELEASED || producer->ring_busy) {
        struct tdagent_ring_region *region = tdagent_ring_region();
        return region != NULL && put_shared(region, entry, mode);
    }
    producer->ring_busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    struct tdagent_ring_region *region = tdagent_ring_region();
    if (producer->ring == NULL && region != NULL)
        producer->ring = tdagent_ring_claim(region, producer->tid);
    int written = 0;
    if (producer->ring != NULL) {
        /* Drop mode: a full ring counts the event in its drop counter, and
         * that is the report (the controller prints the count). */
        const int drop = (mode & TDAGENT_STREAM_HOW) == TDAGENT_STREAM_DROP;
        if (drop || !(mode & TDAGENT_STREAM_WAITS))
            written = tdagent_ring_put(producer->ring, entry, drop) || drop;
        else
            written = tdagent_ring_put_waiting(producer->ring, entry);
    } else if (region != NULL) {
        written = put_shared(region, entry, mode);
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    producer->ring_busy = 0;
    return written;
}

/* Writes a streamed event of `reporter` (the calling thread) to its ring
 * (stream_entry). */
static int stream_report(struct tdagent_thread *reporter, struct tdagent_thread *subject, td_event_e event,
                         void *data)
{
    struct tdagent_ring_put_args entry = {(uint64_t)(uintptr_t)subject, (uint64_t)(uintptr_t)data,
                                          __atomic_load_n(&subject->tid, __ATOMIC_RELAXED),
                                          reporter->tid, (uint32_t)event, 0, 0, 0, 0, NULL};
    note_context(&entry, reporter, subject, event);
    return stream_entry(reporter, &entry);
}

int tdagent_streams_births_unheld(const struct tdagent_thread *creator)
{
    return (__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) & TDAGENT_STREAM_WAITS) &&
           stream_selected(creator, TD_CREATE) &&
           (stream_selected(creator, TD_CONCURRENCY) || !tdagent_event_selected(creator, TD_CONCURRENCY));
}

void tdagent_stream_birth(struct tdagent_thread *rec)
{
    if (!(__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) & TDAGENT_STREAM_WAITS))
        return; /* the stream ended meanwhile */
    if (rec->stream_birth & 1) {
        /* Its name as its creator's report would find it: inherited. */
        char name[16] = {0};
        syscall(SYS_prctl, PR_GET_NAME, name, 0L, 0L, 0L);
        struct tdagent_ring_put_args entry = {(uint64_t)(uintptr_t)rec, (uint64_t)(uintptr_t)rec, rec->tid,
                                              rec->creator_tid, (uint32_t)TD_CREATE, 0,
                                              (uint64_t)(uintptr_t)rec->report_site,
                                              (uint64_t)(uintptr_t)rec->start_routine, 0, name};
        (void)stream_entry(rec, &entry);
    }
    if (rec->stream_birth & 2) {
        struct tdagent_ring_put_args entry = {(uint64_t)(uintptr_t)rec->creator,
                                              (uint64_t)(intptr_t)rec->birth_nthreads, rec->creator_tid,
                                              rec->creator_tid, (uint32_t)TD_CONCURRENCY, 0, 0, 0, 0, NULL};
        (void)stream_entry(rec, &entry);
    }
}

void tdagent_report(struct tdagent_thread *reporter, struct tdagent_thread *subject, td_event_e event, void *data)
{
    /* The shared records of unknown and departed threads never hold a
     * message (several threads would write one buffer). */
    if (subject == &tdagent_unregistered || subject == &tdagent_departed)
        return;
    const int streamed = stream_selected(reporter, event);
    if (!streamed && !tdagent_event_selected(reporter, event))
        return;
    /* A streamed event the ring cannot take is reported the usual way
     * (the controller keeps that way armed): nothing is lost. */
    if (streamed && stream_report(reporter, subject, event, data))
        return;
    void (*function)(struct tdagent_thread *) = tdagent_report_functions[event];
    if (function == NULL)
        return;

    /* A handler reporting TD_CATCHSIG must not interleave with this thread's
     * own report between filling the buffer and pushing it. */
    sigset_t old;
    tdagent_signals_block(&old);
    __atomic_store_n(&subject->eventbuf.eventdata, data, __ATOMIC_RELAXED);
    /* Membership of the list is "the buffer holds a message": a consumer
     * empties the buffer and unlinks the record together. Unlike glibc's
     * `nextevent == NULL` test, this never pushes the list's tail twice. */
    td_event_e previous = __atomic_exchange_n(&subject->eventbuf.eventnum, event, __ATOMIC_SEQ_CST);
    if (previous == TD_EVENT_NONE)
        push_on_last_event(subject);
    unsigned sig = __atomic_load_n(&__tdagent_stop_signals[event], __ATOMIC_RELAXED);
    if (sig > 0 && sig <= 64)
        stop_with_signal(function, subject, (int)sig);
    function(subject);
    /* A controller consumes the message at the stop. Still there: it may
     * be gone (killed), and then the signal was ignored. */
    if (sig > 0 && sig <= 64 && __atomic_load_n(&subject->eventbuf.eventnum, __ATOMIC_ACQUIRE) == event)
        tdagent_check_controller();
    tdagent_signals_restore(&old);
}
