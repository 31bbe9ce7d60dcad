/* tdagent.h — the public interface of libtdagent.so, tdctl's optional
 * target-side runtime (SPEC §5).
 *
 * The agent is loaded with LD_PRELOAD (`tdctl --agent -- prog`) or linked
 * (-ltdagent, before libc). It interposes the pthread calls and publishes the
 * thread-event protocol glibc's nptl publishes (global mask, per-thread
 * records, a LIFO list of records with a buffered message, a live-thread
 * list, one reporting function per event, descriptors of the record layout),
 * so a debugger reads both with one protocol reader. Plain C, libc only.
 *
 * For code inside the target it also provides pthread_getrusage_np (AIX) and
 * _lwp_info (Solaris).
 */
#ifndef TDAGENT_H
#define TDAGENT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/resource.h>
#include <thread_db.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * In-process APIs
 * ------------------------------------------------------------------------- */

/* Modes of pthread_getrusage_np (AIX values: one bit each; 0 is invalid). */
#define PTHRDSINFO_RUSAGE_START 0x01   /* enable collection for all threads */
#define PTHRDSINFO_RUSAGE_STOP 0x02    /* disable collection for all threads */
#define PTHRDSINFO_RUSAGE_COLLECT 0x04 /* fill *rusage for thread ptid */

/* Resource usage of one thread of this process (AIX pthread_getrusage_np).
 *
 * START and STOP switch collection on and off for every thread (rusage and
 * ptid are not used then). The environment variable AIXTHREAD_ENRUSG=ON
 * (read once, when the agent loads) starts with collection on; OFF or unset
 * starts with it off. Linux accounts every thread from its birth, so COLLECT
 * reports totals since the thread started, whenever collection was enabled.
 *
 * COLLECT for the calling thread: getrusage(RUSAGE_THREAD) (microsecond
 * times). For another live thread: /proc/self/task/TID/stat (utime, stime in
 * clock ticks; minflt, majflt), .../status (voluntary / nonvoluntary context
 * switches), .../io (read_bytes, write_bytes / 512 as inblock, oublock), and
 * the process-wide VmHWM of /proc/self/status as ru_maxrss (kB; Linux has no
 * per-thread RSS). ru_nsignals counts the handlers (installed with signal or
 * sigaction while the agent was loaded) entered by that thread. ru_ixrss,
 * ru_idrss, ru_isrss, ru_nswap, ru_msgsnd, ru_msgrcv are 0 (not maintained by
 * Linux).
 *
 * Returns 0, or an error number (errno is left alone):
 *   EINVAL  mode is 0 or unknown; for COLLECT: rusage is NULL or ptid is 0
 *   ENOSYS  COLLECT while collection is off (never started, or stopped)
 *   ESRCH   ptid is not a live thread of this process known to the agent
 *           (it exited, or it was never created through pthread_create)
 */
int pthread_getrusage_np(pthread_t ptid, struct rusage *rusage, int mode);

/* Time accounting of one LWP (Solaris <sys/lwp.h>). */
struct lwpinfo {
    struct timespec lwp_utime; /* CPU time in user mode */
    struct timespec lwp_stime; /* CPU time in the kernel on behalf of the LWP */
    long lwpinfo_pad[64];      /* room for extensions, as on Solaris; zeroed */
};

/* Fills *buffer with the calling LWP's user and system CPU time, from
 * getrusage(RUSAGE_THREAD): the kernel splits the thread's exact runtime
 * (CLOCK_THREAD_CPUTIME_ID's source) by its sampled user:system tick ratio,
 * so lwp_utime + lwp_stime equals CLOCK_THREAD_CPUTIME_ID to the microsecond.
 *
 * The result is copied out with process_vm_writev to this process (falling
 * back to a pipe), which reports a bad buffer instead of faulting.
 * Async-signal-safe.
 *
 * Returns 0, or EFAULT when buffer is not a writable address (NULL, (void*)1,
 * read-only memory). EOVERFLOW (Solaris, for 32-bit callers) cannot occur:
 * time_t is 64 bits on every Linux ABI this builds for.
 */
int _lwp_info(struct lwpinfo *buffer);

/* ---------------------------------------------------------------------------
 * The event protocol (read and written by the controller, tdctl's core/)
 * ------------------------------------------------------------------------- */

/* "tdagent 1": the protocol version. Its presence identifies the backend. */
extern const char __tdagent_version[];

/* One per-thread record. Its address is the thread handle; its layout is
 * published only through the _tdagent_db_* descriptors below. */
struct tdagent_thread;

/* Link of the live-thread list, in the shape of glibc's list_t. */
struct tdagent_list {
    struct tdagent_list *next;
    struct tdagent_list *prev;
};

/* Global event mask: an event is reported by a thread whose report_events is
 * on when it is in this mask or in the thread's own eventbuf.eventmask. */
extern td_thr_events_t __tdagent_threads_events;
/* Head of the LIFO list of records holding an unread message, linked through
 * their nextevent field (NULL-terminated). Pushed with compare-and-swap;
 * a record is pushed when its eventnum goes from TD_EVENT_NONE to an event,
 * so a consumer clears eventnum and unlinks the record. */
extern struct tdagent_thread *__tdagent_last_event;
/* Circular list of live records (through their `list` member); walk `next`
 * from the head until it returns to the head. */
extern struct tdagent_list __tdagent_thread_list;
/* Live threads (like glibc's __nptl_nthreads). */
extern int __tdagent_nthreads;
/* The level last set with pthread_setconcurrency; 0 initially. */
extern int __tdagent_concurrency;

/* Semaphores used as locks (sem_init to 1, not process-shared, never posted
 * above 1) and the TID of the last thread that took each one and has not
 * posted it: slots of { uint64_t address (0 empty, 1 tombstone); int32_t
 * holder (0 none); }. __tdagent_lock_sems_shape is { slots, probes, bytes
 * per slot, offset of holder }; a lookup of address A probes that many slots
 * from ((A >> 3) * __tdagent_lock_sems_hash) >> (64 - log2(slots)),
 * wrapping, and ends at an empty slot. */
extern const uint32_t __tdagent_lock_sems_shape[4];
extern const uint64_t __tdagent_lock_sems_hash;
/* Lock semaphores that found no slot (not tracked). */
extern unsigned long __tdagent_lock_sems_untracked;

/* Event rings (agent/event_rings.c): where the region is. state 0 none, 1
 * being made, 2 ready, 3 cannot be made; the memfd's descriptor, the
 * region's size in bytes and its address, in this process. A controller maps
 * the memfd again (/proc/PID/fd/<fd>) and reads the layout from the
 * _tdagent_db_ring_* descriptors and the region's header. */
struct tdagent_rings_anchor {
    int32_t state;
    int32_t fd;
    uint64_t size;
    uint64_t address;
};
extern struct tdagent_rings_anchor __tdagent_rings;
/* Events a thread writes to its ring instead of reporting them the usual
 * way, while __tdagent_streaming is set; a full ring, or no free ring, falls
 * back to the usual way. */
extern td_thr_events_t __tdagent_stream_events;
/* Set with __tdagent_stream_events: every known thread streams those events,
 * whatever its own report_events (a thread born meanwhile too). 0: off;
 * 1: an event a full ring cannot take is reported the usual way (lossless);
 * 2: it is counted in the ring's drop counter instead; either plus 4: a
 * report a ring cannot take waits for room rather than stopping (the
 * controller left the threads born meanwhile untraced). */
extern unsigned char __tdagent_streaming;

/* Reporting functions: each a one-byte `ret` followed by int3 padding, called
 * with the record whose buffer holds the message (for TD_CREATE the new
 * thread's record, for every other event the reporting thread's own). */
void __tdagent_event_create(struct tdagent_thread *subject);
void __tdagent_event_death(struct tdagent_thread *subject);
void __tdagent_event_reap(struct tdagent_thread *subject);
void __tdagent_event_lock_try(struct tdagent_thread *subject);
void __tdagent_event_sleep(struct tdagent_thread *subject);
void __tdagent_event_ready(struct tdagent_thread *subject);
void __tdagent_event_timeout(struct tdagent_thread *subject);
void __tdagent_event_catchsig(struct tdagent_thread *subject);
void __tdagent_event_concurrency(struct tdagent_thread *subject);
void __tdagent_event_pri_inherit(struct tdagent_thread *subject);

/* Layout descriptors in glibc's _thread_db_* format: { size in bits, element
 * count, byte offset }. pthread_* fields are relative to the record,
 * td_eventbuf_t_* to the eventbuf, list_t_* to a struct tdagent_list. */
extern const uint32_t _tdagent_db_pthread_report_events[3];
extern const uint32_t _tdagent_db_pthread_eventbuf[3];
extern const uint32_t _tdagent_db_pthread_eventbuf_eventmask[3];
extern const uint32_t _tdagent_db_pthread_eventbuf_eventmask_event_bits[3];
extern const uint32_t _tdagent_db_td_eventbuf_t_eventnum[3];
extern const uint32_t _tdagent_db_td_eventbuf_t_eventdata[3];
extern const uint32_t _tdagent_db_td_thr_events_t_event_bits[3];
extern const uint32_t _tdagent_db_pthread_nextevent[3];
extern const uint32_t _tdagent_db_pthread_tid[3];
extern const uint32_t _tdagent_db_pthread_start_routine[3];
extern const uint32_t _tdagent_db_pthread_list[3];
extern const uint32_t _tdagent_db_list_t_next[3];
extern const uint32_t _tdagent_db_list_t_prev[3];
/* Sizes in bytes. */
extern const uint32_t _tdagent_db_sizeof_pthread;
extern const uint32_t _tdagent_db_sizeof_td_eventbuf_t;
extern const uint32_t _tdagent_db_sizeof_td_thr_events_t;
extern const uint32_t _tdagent_db_sizeof_list_t;

#ifdef __cplusplus
}
#endif

#endif /* TDAGENT_H */
