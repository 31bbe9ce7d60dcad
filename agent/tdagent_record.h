/* tdagent_record.h — the layout of the agent's per-thread record.
 *
 * Private to the agent: a controller must read the layout from the
 * _tdagent_db_* descriptors, never from this header. Tests include it to
 * check that the descriptors match.
 */
#ifndef TDAGENT_RECORD_H
#define TDAGENT_RECORD_H

#include <pthread.h>
#include <sys/types.h>
#include <thread_db.h>

#include "tdagent.h"

/* Lifecycle of a record (field `state`), changed with compare-and-swap. */
enum tdagent_state {
    TDAGENT_JOINABLE = 0, /* running, joinable */
    TDAGENT_DETACHED = 1, /* running (or exiting), reaps itself at exit */
    TDAGENT_EXITED = 2,   /* joinable thread that exited, waits for its joiner */
    TDAGENT_REAPED = 3,   /* joined, or detached and exited */
};

/* Membership of the pthread_t -> record map (field `map_state`). */
enum tdagent_map_state {
    TDAGENT_MAP_NEVER = 0, /* not inserted yet */
    TDAGENT_MAP_IN = 1,
    TDAGENT_MAP_GONE = 2, /* removed at reap; never inserted again */
};

struct tdagent_thread {
    /* --- published through descriptors (the protocol) ------------------- */
    struct tdagent_list list;          /* link in __tdagent_thread_list while live */
    pid_t tid;                         /* the LWP; set by the thread itself at start, 0 once it exited */
    unsigned char report_events;       /* event reporting enabled; starts 0 */
    unsigned char pad0_[3];
    td_eventbuf_t eventbuf;            /* eventmask, eventnum (TD_EVENT_NONE: empty), eventdata */
    struct tdagent_thread *nextevent;  /* link of the __tdagent_last_event list */
    void *(*start_routine)(void *);    /* the user's start routine (NULL for the initial thread) */

    /* --- private to the agent ------------------------------------------- */
    void *arg;                         /* argument of start_routine */
    pthread_t pthread;                 /* glibc's handle of this thread */
    struct tdagent_thread *hash_next;  /* chain of the pthread_t map */
    struct tdagent_thread *pool_next;  /* chain of all records not in use */
    int state;                         /* enum tdagent_state (atomic) */
    int refs;                          /* owners: the lifecycle and, during pthread_create, the creator (atomic) */
    int phase;                         /* creation handshake futex (enum in thread_lifecycle.c) */
    int hold;                          /* creator reports TD_CREATE: the new thread waits for it */
    int birth_nthreads;                /* __tdagent_nthreads right after this thread was counted */
    unsigned char map_state;           /* enum tdagent_map_state; under the registry lock */
    unsigned char has_trampoline;      /* started through the agent's start routine */
    unsigned char death_reported;      /* TD_DEATH path already run (only touched by the thread itself) */
    unsigned char stream_birth;        /* its creator left TD_CREATE (1) and TD_CONCURRENCY (2) for it to stream */
    unsigned long nsignals;            /* handlers entered by this thread (ru_nsignals) */
    struct tdagent_ring *ring;         /* its event ring once claimed; (void *)1 once released */
    int ring_busy;                     /* a put is under way (a handler reporting meanwhile falls back) */
    /* What this thread's streamed reports carry besides the message, noted
     * by the wrapper that reports (tdagent_note_report); only the thread
     * itself writes them. */
    void *report_site;                 /* return address into the wrapper's caller */
    uint32_t report_lock_kind;         /* enum tdagent_lock_kind of the lock waited for */
    int32_t report_lock_owner;         /* its owner's TID when the wait began; 0 unknown */
    /* The creator of a thread that streams its own birth (stream_birth). */
    struct tdagent_thread *creator;
    pid_t creator_tid;
    char exit_name[16];                /* its comm when its end began (streamed with its last reports) */
    /* The signal mask the thread is to run with, when its creator had it
     * start with signals blocked until it registers (start_masked). */
    uint64_t start_sigmask;
    unsigned char start_masked;
} __attribute__((aligned(64)));

#endif /* TDAGENT_RECORD_H */
