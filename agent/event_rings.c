/* Event rings: each thread's events written where the controller reads
 * them without stopping anyone (SPEC §5's event buffer, as a ring).
 *
 * One region, a memfd the agent maps MAP_SHARED and the controller maps
 * again through /proc/PID/fd/N, holds a header and `ring_count` rings. A
 * thread claims a free ring at its first streamed event and is its only
 * producer; the controller is its only consumer. The producer writes an
 * entry, then publishes `head` with a release store; the consumer loads
 * `head` with acquire, reads the entries, then stores `tail` with release.
 * No system call per event on either side, but one: the put that fills a
 * ring to half bumps the header's `wake` word and FUTEX_WAKEs it (shared:
 * the controller sleeps on it in its own mapping), so a burst is drained
 * before the ring is full however long the controller meant to sleep.
 * The controller writes a
 * heartbeat at each drain; a thread that finds it older than a second (every
 * 256 puts, and at a full ring) turns streaming off, so a target whose
 * controller died stops writing to rings nobody reads (in a waiting stream a
 * quarter second has it look at the process's tracer instead:
 * check_heartbeat). A full ring is never
 * overwritten: the put fails, and the caller falls back to a stopping
 * report, or, when the controller asked for drops (__tdagent_streaming's
 * low bits 2), the ring's drop counter counts the event. When the
 * controller leaves threads born meanwhile untraced (TDAGENT_STREAM_WAITS
 * set), nothing can stop for a report: a full ring is waited on, in naps,
 * until the controller drained it, or until the process has no tracer.
 * A thread without a ring of its own (every ring taken, its ring released
 * at its end, or its own put interrupted by a signal handler that reports)
 * writes to the shared ring after the per-thread rings; only when that is
 * full does it fall back to a stopping report.
 *
 * The region is made on first use, by whichever thread needs it first
 * (memfd_create, ftruncate, mmap: raw system calls, async-signal-safe); a
 * thread that finds it being made falls back for that event. A forked
 * child drops the mapping it inherited (its events are not the parent's)
 * and makes its own if it streams. The layout reaches the controller only
 * through the _tdagent_db_ring_* descriptors and the header's own sizes. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tdagent_internal.h"

#define RING_MAGIC 0x47524454u /* "TDRG" */
#define RING_VERSION 4u /* 4: the shared ring; 3 had none */
#define RING_COUNT 256u
#define RING_ENTRIES 1024u /* a power of two */
#define HEARTBEAT_EVERY 256u /* puts between two looks at the heartbeat; a power of two */
#define HEARTBEAT_STALE_NS 1000000000ull
/* In a waiting stream a stale heartbeat costs only a look at the process's
 * tracer (streaming stays on): it may come sooner. */
#define HEARTBEAT_STALE_WAITING_NS 250000000ull
#define SHARED_ENTRIES 16384u /* the shared ring's slots; a power of two */
#define MAKER_NAP_NS 50000ull /* a wait for the region's maker, between two looks */
#define WAIT_NAP_NS 1000000ull /* the longest a full ring's producer sleeps between two looks */
#define EXEC_SEIZE_BOUND_MS 2000u /* the longest an untraced thread waits to be seized before its exec */
#define WAIT_LOOK_EVERY 64u /* sleeps between two looks at the heartbeat (at most 64 ms); a power of two */

struct tdagent_ring_entry {
    uint64_t time_ns;     /* CLOCK_MONOTONIC in the target when reported */
    uint64_t subject;     /* the thread handle the message is about */
    uint64_t data;        /* td_event_msg_t.msg.data */
    int32_t subject_tid;  /* the subject's TID (0 when not known) */
    int32_t reporter_tid; /* the reporting thread's TID */
    uint32_t event;       /* td_event_e */
    int32_t lock_owner;   /* a lock event: the lock's owner TID when the wait began; 0 unknown */
    uint64_t call_site;   /* a wait, a lock event or TD_CREATE: the return address into the
                             caller of the reporting wrapper; 0 otherwise */
    uint64_t start_routine; /* TD_CREATE: the new thread's start routine; 0 otherwise */
    uint32_t lock_kind;   /* a lock event: enum tdagent_lock_kind; 0 otherwise */
    uint32_t pad_;
    char name[16];        /* the subject's comm when its thread is about to end or just began
                             (TD_CREATE, TD_DEATH, its own TD_REAP and TD_CONCURRENCY at its
                             end): it may be gone when the controller drains; else empty */
};

struct tdagent_ring {
    uint64_t head;  /* entries published (producer; release) */
    uint64_t tail;  /* entries consumed (consumer; release) */
    uint64_t drops; /* events counted instead of written (full ring) */
    int32_t owner;  /* TID of the producer; 0 free; minus its TID once its thread ended */
    uint32_t waiting; /* a producer sleeps on the tail's low half for room (a waiting stream) */
    uint32_t pad_[8];
    struct tdagent_ring_entry entries[RING_ENTRIES];
};

struct tdagent_ring_region {
    uint32_t magic;
    uint32_t version;
    uint32_t ring_count;
    uint32_t ring_entries;
    uint32_t ring_offset;  /* bytes from the region to ring 0 */
    uint32_t ring_stride;  /* bytes from one ring to the next */
    uint32_t entry_size;
    uint32_t wake;         /* futex word, shared (never FUTEX_PRIVATE_FLAG) */
    uint64_t heartbeat_ns; /* the controller's CLOCK_MONOTONIC at its last drain */
    uint64_t no_ring;      /* events that found no free ring (nor room in the shared ring) */
    uint32_t shared_offset;  /* bytes from the region to the shared ring */
    uint32_t shared_entries; /* its slots */
    uint32_t seize_requests; /* threads about to exec untraced, asking to be seized (tdagent_before_exec) */
    uint32_t pad_[5];
};

/* The shared ring: where a thread with no ring of its own (more threads
 * stream than there are rings, its ring gone at its end, or a signal handler
 * that interrupted its own put) writes, many producers and one consumer. A
 * producer takes slot `reserved` with a compare-and-swap while fewer than
 * SHARED_ENTRIES slots are taken and not consumed, writes the entry, then
 * stores the slot's position + 1 in `published` with release. The consumer
 * takes the published slots in order; entries need not be in time order
 * (a producer may be preempted between its slot and its clock reading). */
struct tdagent_shared_ring {
    uint64_t reserved; /* slots taken by producers */
    uint64_t tail;     /* slots consumed (consumer; release) */
    uint32_t waiting;  /* producers sleep on the tail's low half for room (a waiting stream) */
    uint32_t pad_[11];
    uint64_t published[SHARED_ENTRIES];
    struct tdagent_ring_entry entries[SHARED_ENTRIES];
};

TDAGENT_EXPORT struct tdagent_rings_anchor __tdagent_rings;
/* Events written to the rings instead of stopping, and the flag that has
 * every known thread stream them (the controller sets both). */
TDAGENT_EXPORT td_thr_events_t __tdagent_stream_events;
TDAGENT_EXPORT unsigned char __tdagent_streaming;
/* The highest __tdagent_streaming bit this agent knows: a controller sets
 * TDAGENT_STREAM_WAITS (and leaves new threads untraced) only when it is
 * there. */
TDAGENT_EXPORT const uint32_t _tdagent_db_stream_bits = TDAGENT_STREAM_WAITS;

#define MEMBER_SIZE(type, member) (sizeof(((type *)0)->member))
#define RING_FIELD(name, type, member) \
    TDAGENT_EXPORT const uint32_t _tdagent_db_ring_##name[3] = {MEMBER_SIZE(type, member) * 8, 1, offsetof(type, member)}
RING_FIELD(region_magic, struct tdagent_ring_region, magic);
RING_FIELD(region_version, struct tdagent_ring_region, version);
RING_FIELD(region_ring_count, struct tdagent_ring_region, ring_count);
RING_FIELD(region_ring_entries, struct tdagent_ring_region, ring_entries);
RING_FIELD(region_ring_offset, struct tdagent_ring_region, ring_offset);
RING_FIELD(region_ring_stride, struct tdagent_ring_region, ring_stride);
RING_FIELD(region_entry_size, struct tdagent_ring_region, entry_size);
RING_FIELD(region_wake, struct tdagent_ring_region, wake);
RING_FIELD(region_heartbeat_ns, struct tdagent_ring_region, heartbeat_ns);
RING_FIELD(region_no_ring, struct tdagent_ring_region, no_ring);
RING_FIELD(region_shared_offset, struct tdagent_ring_region, shared_offset);
RING_FIELD(region_shared_entries, struct tdagent_ring_region, shared_entries);
RING_FIELD(shared_reserved, struct tdagent_shared_ring, reserved);
RING_FIELD(shared_tail, struct tdagent_shared_ring, tail);
RING_FIELD(shared_waiting, struct tdagent_shared_ring, waiting);
RING_FIELD(waiting, struct tdagent_ring, waiting);
RING_FIELD(shared_published, struct tdagent_shared_ring, published);
RING_FIELD(shared_slots, struct tdagent_shared_ring, entries);
RING_FIELD(head, struct tdagent_ring, head);
RING_FIELD(tail, struct tdagent_ring, tail);
RING_FIELD(drops, struct tdagent_ring, drops);
RING_FIELD(owner, struct tdagent_ring, owner);
RING_FIELD(entries, struct tdagent_ring, entries);
RING_FIELD(entry_time_ns, struct tdagent_ring_entry, time_ns);
RING_FIELD(entry_subject, struct tdagent_ring_entry, subject);
RING_FIELD(entry_data, struct tdagent_ring_entry, data);
RING_FIELD(entry_subject_tid, struct tdagent_ring_entry, subject_tid);
RING_FIELD(entry_reporter_tid, struct tdagent_ring_entry, reporter_tid);
RING_FIELD(entry_event, struct tdagent_ring_entry, event);
RING_FIELD(entry_lock_owner, struct tdagent_ring_entry, lock_owner);
RING_FIELD(entry_call_site, struct tdagent_ring_entry, call_site);
RING_FIELD(entry_start_routine, struct tdagent_ring_entry, start_routine);
RING_FIELD(entry_lock_kind, struct tdagent_ring_entry, lock_kind);
RING_FIELD(entry_name, struct tdagent_ring_entry, name);
RING_FIELD(region_seize_requests, struct tdagent_ring_region, seize_requests);

enum { anchor_none = 0, anchor_making = 1, anchor_ready = 2, anchor_failed = 3 };
/* The thread making the region (anchor_making). */
static pid_t region_maker;

static uint64_t monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static size_t region_size(void)
{
    return offsetof(struct tdagent_ring_region, pad_) + sizeof(((struct tdagent_ring_region *)0)->pad_) +
           (size_t)RING_COUNT * sizeof(struct tdagent_ring) + sizeof(struct tdagent_shared_ring);
}

static struct tdagent_shared_ring *shared_ring_of(struct tdagent_ring_region *region)
{
    return (struct tdagent_shared_ring *)((char *)region + region->shared_offset);
}

static struct tdagent_ring *ring_at(struct tdagent_ring_region *region, uint32_t i)
{
    return (struct tdagent_ring *)((char *)region + region->ring_offset + (size_t)i * region->ring_stride);
}

static struct tdagent_ring_region *make_region(void)
{
    const size_t size = region_size();
    long fd = syscall(SYS_memfd_create, "tdagent-rings", MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (syscall(SYS_ftruncate, fd, (long)size) != 0) {
        syscall(SYS_close, fd);
        return NULL;
    }
    void *p = (void *)syscall(SYS_mmap, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0L);
    if (p == MAP_FAILED) {
        syscall(SYS_close, fd);
        return NULL;
    }
    struct tdagent_ring_region *region = p;
    region->version = RING_VERSION;
    region->ring_count = RING_COUNT;
    region->ring_entries = RING_ENTRIES;
    region->shared_offset = (uint32_t)(size - sizeof(struct tdagent_shared_ring));
    region->shared_entries = SHARED_ENTRIES;
    region->ring_offset = region->shared_offset - (uint32_t)((size_t)RING_COUNT * sizeof(struct tdagent_ring));
    region->ring_stride = sizeof(struct tdagent_ring);
    region->entry_size = sizeof(struct tdagent_ring_entry);
    region->heartbeat_ns = monotonic_ns(); /* the controller has a second to map it */
    __atomic_store_n(&region->magic, RING_MAGIC, __ATOMIC_RELEASE);
    __tdagent_rings.fd = (int32_t)fd;
    __tdagent_rings.size = size;
    __atomic_store_n(&__tdagent_rings.address, (uint64_t)(uintptr_t)p, __ATOMIC_RELEASE);
    return region;
}

struct tdagent_ring_region *tdagent_ring_region(void)
{
    int32_t state = __atomic_load_n(&__tdagent_rings.state, __ATOMIC_ACQUIRE);
    if (state == anchor_ready)
        return (struct tdagent_ring_region *)(uintptr_t)__tdagent_rings.address;
    if (state == anchor_making && (__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) & TDAGENT_STREAM_WAITS)) {
        /* Nothing may stop in a waiting stream: wait for the maker (unless
         * this is the maker, in a signal handler that reports). */
        if (__atomic_load_n(&region_maker, __ATOMIC_RELAXED) == (pid_t)syscall(SYS_gettid))
            return NULL;
        const struct timespec nap = {0, (long)MAKER_NAP_NS};
        while ((state = __atomic_load_n(&__tdagent_rings.state, __ATOMIC_ACQUIRE)) == anchor_making)
            syscall(SYS_nanosleep, &nap, NULL);
        return state == anchor_ready ? (struct tdagent_ring_region *)(uintptr_t)__tdagent_rings.address : NULL;
    }
    if (state != anchor_none)
        return NULL;
    if (!__atomic_compare_exchange_n(&__tdagent_rings.state, &state, anchor_making, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return NULL; /* another thread makes it: this event falls back */
    __atomic_store_n(&region_maker, (pid_t)syscall(SYS_gettid), __ATOMIC_RELAXED);
    struct tdagent_ring_region *region = make_region();
    __atomic_store_n(&__tdagent_rings.state, region != NULL ? anchor_ready : anchor_failed, __ATOMIC_RELEASE);
    return region;
}

struct tdagent_ring *tdagent_ring_claim(struct tdagent_ring_region *region, pid_t tid)
{
    for (uint32_t i = 0; i < region->ring_count; ++i) {
        struct tdagent_ring *r = ring_at(region, i);
        int32_t free_owner = 0;
        if (__atomic_load_n(&r->owner, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(&r->owner, &free_owner, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return r;
    }
    return NULL;
}

void tdagent_ring_release(struct tdagent_ring *r)
{
    /* The TID stays readable (negated): drops counted since the last drain
     * are still the ended thread's. */
    int32_t owner = __atomic_load_n(&r->owner, __ATOMIC_RELAXED);
    __atomic_store_n(&r->owner, owner > 0 ? -owner : owner, __ATOMIC_RELEASE);
}

/* The controller's heartbeat is older than HEARTBEAT_STALE_NS (in a waiting
 * stream HEARTBEAT_STALE_WAITING_NS) at `now`: it
 * is gone or stuck, so streaming goes off by itself (its events then take
 * the usual way, a stop a stuck controller takes later); a controller that
 * is gone (no tracer) takes every reporting with it
 * (tdagent_check_controller). A waiting stream (TDAGENT_STREAM_WAITS) has
 * threads with no tracer to stop for: it stays on while the process has a
 * tracer (a stuck controller holds the threads whose rings are full, as
 * its stops would) and goes off with every reporting once it has none.
 * Read at every full ring and every HEARTBEAT_EVERY puts. */
static void check_heartbeat(uint64_t now)
{
    struct tdagent_ring_region *region =
        (struct tdagent_ring_region *)(uintptr_t)__atomic_load_n(&__tdagent_rings.address, __ATOMIC_ACQUIRE);
    if (region == NULL)
        return;
    uint64_t beat = __atomic_load_n(&region->heartbeat_ns, __ATOMIC_ACQUIRE);
    const int waiting = (__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) & TDAGENT_STREAM_WAITS) != 0;
    if (now <= beat || now - beat <= (waiting ? HEARTBEAT_STALE_WAITING_NS : HEARTBEAT_STALE_NS))
        return;
    if (waiting)
        tdagent_check_controller();
    else if (__atomic_exchange_n(&__tdagent_streaming, 0, __ATOMIC_RELAXED))
        tdagent_check_controller();
}

/* The ring just became half full: the controller, asleep until its next
 * drain, is woken now (the word changes first, so a controller about to
 * sleep on its old value does not sleep). */
static void wake_controller(void)
{
    struct tdagent_ring_region *region =
        (struct tdagent_ring_region *)(uintptr_t)__atomic_load_n(&__tdagent_rings.address, __ATOMIC_ACQUIRE);
    if (region == NULL)
        return;
    __atomic_add_fetch(&region->wake, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &region->wake, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void fill_entry(struct tdagent_ring_entry *slot, const struct tdagent_ring_put_args *e, uint64_t now)
{
    slot->time_ns = now;
    slot->subject = e->subject;
    slot->data = e->data;
    slot->subject_tid = e->subject_tid;
    slot->reporter_tid = e->reporter_tid;
    slot->event = e->event;
    slot->lock_owner = e->lock_owner;
    slot->call_site = e->call_site;
    slot->start_routine = e->start_routine;
    slot->lock_kind = e->lock_kind;
    if (e->name != NULL)
        memcpy(slot->name, e->name, sizeof slot->name);
    else
        slot->name[0] = 0;
}

/* One put to the shared ring: 1 written; 0 full, with the tail it found
 * in *full_tail (counted in no_ring when `count`). */
static int shared_put_once(struct tdagent_ring_region *region, const struct tdagent_ring_put_args *e, int count,
                           uint64_t *full_tail)
{
    struct tdagent_shared_ring *s = shared_ring_of(region);
    uint64_t taken = __atomic_load_n(&s->reserved, __ATOMIC_RELAXED);
    uint64_t tail;
    do {
        tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
        if (taken - tail >= SHARED_ENTRIES) {
            if (count)
                __atomic_add_fetch(&region->no_ring, 1, __ATOMIC_RELAXED);
            check_heartbeat(monotonic_ns());
            *full_tail = tail;
            return 0;
        }
    } while (!__atomic_compare_exchange_n(&s->reserved, &taken, taken + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    const uint32_t i = (uint32_t)(taken & (SHARED_ENTRIES - 1));
    const uint64_t now = monotonic_ns();
    if ((taken & (HEARTBEAT_EVERY - 1)) == 0)
        check_heartbeat(now);
    fill_entry(&s->entries[i], e, now);
    __atomic_store_n(&s->published[i], taken + 1, __ATOMIC_RELEASE);
    if (taken + 1 - tail == SHARED_ENTRIES / 2)
        wake_controller();
    return 1;
}

int tdagent_ring_put_shared(struct tdagent_ring_region *region, const struct tdagent_ring_put_args *e)
{
    uint64_t full_tail = 0;
    return shared_put_once(region, e, 1, &full_tail);
}

int tdagent_ring_put_shared_waiting(struct tdagent_ring_region *region, const struct tdagent_ring_put_args *e)
{
    struct tdagent_shared_ring *s = shared_ring_of(region);
    uint64_t full_tail = 0;
    for (unsigned naps = 0;; ) {
        if (shared_put_once(region, e, 0, &full_tail))
            return 1;
        if (!tdagent_ring_wait_room(&naps, &s->tail, &s->waiting, full_tail)) {
            __atomic_add_fetch(&region->no_ring, 1, __ATOMIC_RELAXED);
            return 0;
        }
    }
}

int tdagent_ring_put(struct tdagent_ring *r, const struct tdagent_ring_put_args *e, int count_drop)
{
    const uint64_t head = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
    const uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
    if (head - tail >= RING_ENTRIES) {
        if (count_drop)
            __atomic_add_fetch(&r->drops, 1, __ATOMIC_RELAXED);
        check_heartbeat(monotonic_ns());
        return 0;
    }
    struct tdagent_ring_entry *slot = &r->entries[head & (RING_ENTRIES - 1)];
    const uint64_t now = monotonic_ns();
    if ((head & (HEARTBEAT_EVERY - 1)) == 0)
        check_heartbeat(now);
    fill_entry(slot, e, now);
    __atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
    if (head + 1 - tail == RING_ENTRIES / 2)
        wake_controller();
    return 1;
}

/* The tail's low half: the futex word a producer sleeps on (little endian). */
static uint32_t *tail_word(uint64_t *tail)
{
    return (uint32_t *)(void *)tail;
}

int tdagent_ring_wait_room(unsigned *naps, uint64_t *tail, uint32_t *waiting, uint64_t full_tail)
{
    if (!(__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) & TDAGENT_STREAM_WAITS))
        return 0;
    if (*naps == 0)
        wake_controller();
    /* The heartbeat is looked at every 64 sleeps (a clock read; /proc is
     * read only when it is stale). */
    if ((*naps & (WAIT_LOOK_EVERY - 1)) == WAIT_LOOK_EVERY - 1) {
        check_heartbeat(monotonic_ns());
        if (!(__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) & TDAGENT_STREAM_WAITS))
            return 0;
    }
    ++*naps;
    /* The flag first, then a look at the tail (the consumer stores the tail,
     * then looks at the flag): a drain in between is seen here, or wakes
     * the sleep below; a sleep that misses it ends at its bound anyway. */
    __atomic_store_n(waiting, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(tail, __ATOMIC_SEQ_CST) != full_tail)
        return 1;
    struct timespec bound = {0, (long)WAIT_NAP_NS};
    syscall(SYS_futex, tail_word(tail), FUTEX_WAIT, (uint32_t)full_tail, &bound, NULL, 0);
    return 1;
}

void tdagent_before_exec(void)
{
    if (!(__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) & TDAGENT_STREAM_WAITS))
        return;
    const int saved = errno;
    struct tdagent_ring_region *region = NULL;
    if (tdagent_thread_untraced() == 1 && tdagent_process_untraced() == 0)
        region = tdagent_ring_region();
    if (region != NULL) {
        __atomic_add_fetch(&region->seize_requests, 1, __ATOMIC_RELEASE);
        wake_controller();
        /* Seized at the controller's next drain (a hold seizes every
         * thread): a few ms. A controller gone or stuck past the bound
         * leaves the exec to happen untraced. */
        const struct timespec nap = {0, 1000000};
        for (unsigned naps = 0; naps < EXEC_SEIZE_BOUND_MS; ++naps) {
            syscall(SYS_nanosleep, &nap, NULL);
            if (tdagent_thread_untraced() != 1 || !(__atomic_load_n(&__tdagent_streaming, __ATOMIC_RELAXED) &
                                                    TDAGENT_STREAM_WAITS))
                break;
            if (naps % 100 == 99 && tdagent_process_untraced() != 0)
                break;
        }
    }
    errno = saved;
}

int tdagent_ring_put_waiting(struct tdagent_ring *r, const struct tdagent_ring_put_args *e)
{
    for (unsigned naps = 0;;) {
        if (tdagent_ring_put(r, e, 0))
            return 1;
        const uint64_t full_tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
        if (!tdagent_ring_wait_room(&naps, &r->tail, &r->waiting, full_tail))
            return 0;
    }
}

void tdagent_rings_after_fork_child(void)
{
    /* The parent's region is the parent's: unmap this copy of it. */
    if (__atomic_load_n(&__tdagent_rings.state, __ATOMIC_ACQUIRE) == anchor_ready) {
        syscall(SYS_munmap, (void *)(uintptr_t)__tdagent_rings.address, (size_t)__tdagent_rings.size);
        syscall(SYS_close, (long)__tdagent_rings.fd);
    }
    memset(&__tdagent_rings, 0, sizeof __tdagent_rings);
    region_maker = 0;
    /* Nobody drains a child's rings: it reports as it would without them. */
    memset(&__tdagent_stream_events, 0, sizeof __tdagent_stream_events);
    __atomic_store_n(&__tdagent_streaming, 0, __ATOMIC_RELAXED);
}
