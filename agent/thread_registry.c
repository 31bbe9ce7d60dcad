/* Where records live: a pool carved from anonymous mappings that are never
 * unmapped (a controller reading a stale handle must not fault), a
 * pthread_t -> record map for join/detach/getrusage, and the live-thread
 * list the controller walks. One lock guards all three; the controller reads
 * the list without it, so links are published in an order a reader can
 * follow. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "tdagent_internal.h"

enum {
    map_buckets = 1024,
    records_per_slab = 64,
};

static struct tdagent_lock registry_lock;
static struct tdagent_thread *map[map_buckets];
static struct tdagent_thread *pool;       /* records not in use, newest first */
static struct tdagent_thread *slab;       /* the mapping records are carved from */
static unsigned slab_used = records_per_slab;

static unsigned bucket_of(pthread_t thread)
{
    uintptr_t v = (uintptr_t)thread;
    return (unsigned)((v >> 6) ^ (v >> 16)) % map_buckets;
}

/* A record can be handed out again once no owner holds it and its buffer is
 * empty and off the message list: a controller has consumed its message. */
static int is_reusable(const struct tdagent_thread *rec)
{
    return __atomic_load_n(&rec->eventbuf.eventnum, __ATOMIC_ACQUIRE) == TD_EVENT_NONE &&
           __atomic_load_n(&rec->nextevent, __ATOMIC_ACQUIRE) == NULL;
}

static struct tdagent_thread *take_from_pool_locked(void)
{
    for (struct tdagent_thread **link = &pool; *link != NULL; link = &(*link)->pool_next) {
        if (is_reusable(*link)) {
            struct tdagent_thread *rec = *link;
            *link = rec->pool_next;
            return rec;
        }
    }
    return NULL;
}

static struct tdagent_thread *carve_locked(void)
{
    if (slab_used == records_per_slab) {
        void *p = mmap(NULL, sizeof(struct tdagent_thread) * records_per_slab, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        slab = p;
        slab_used = 0;
    }
    return &slab[slab_used++];
}

struct tdagent_thread *tdagent_registry_alloc(void)
{
    tdagent_lock_acquire(&registry_lock);
    struct tdagent_thread *rec = take_from_pool_locked();
    if (rec == NULL)
        rec = carve_locked();
    tdagent_lock_release(&registry_lock);
    if (rec == NULL)
        return NULL;

    /* The protocol fields a controller may still look at are reset one by
     * one; nextevent is already NULL (is_reusable) and stays untouched. */
    rec->list.next = rec->list.prev = NULL;
    __atomic_store_n(&rec->tid, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&rec->report_events, 0, __ATOMIC_RELAXED);
    memset(&rec->eventbuf.eventmask, 0, sizeof rec->eventbuf.eventmask);
    rec->eventbuf.eventdata = NULL;
    rec->start_routine = NULL;
    rec->arg = NULL;
    rec->pthread = 0;
    rec->hash_next = NULL;
    rec->pool_next = NULL;
    rec->state = TDAGENT_JOINABLE;
    rec->refs = 2;
    rec->phase = 0;
    rec->hold = 0;
    rec->birth_nthreads = 0;
    rec->map_state = TDAGENT_MAP_NEVER;
    rec->has_trampoline = 0;
    rec->death_reported = 0;
    rec->stream_birth = 0;
    rec->creator = NULL;
    rec->creator_tid = 0;
    rec->nsignals = 0;
    rec->ring = NULL;
    rec->ring_busy = 0;
    return rec;
}

void tdagent_registry_release(struct tdagent_thread *rec)
{
    if (__atomic_sub_fetch(&rec->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    tdagent_lock_acquire(&registry_lock);
    rec->pool_next = pool;
    pool = rec;
    tdagent_lock_release(&registry_lock);
}

static void map_insert_locked(struct tdagent_thread *rec, pthread_t thread)
{
    if (rec->map_state != TDAGENT_MAP_NEVER)
        return;
    rec->pthread = thread;
    unsigned b = bucket_of(thread);
    rec->hash_next = map[b];
    map[b] = rec;
    rec->map_state = TDAGENT_MAP_IN;
}

static void map_remove_locked(struct tdagent_thread *rec)
{
    if (rec->map_state != TDAGENT_MAP_IN)
        return;
    for (struct tdagent_thread **link = &map[bucket_of(rec->pthread)]; *link != NULL; link = &(*link)->hash_next) {
        if (*link == rec) {
            *link = rec->hash_next;
            break;
        }
    }
    rec->hash_next = NULL;
    rec->map_state = TDAGENT_MAP_GONE;
}

/* Appends at the tail: the new record's own links first, then the store
 * that makes it reachable from the list (release), so a reader walking
 * `next` never sees a half-linked record. */
static void list_append_locked(struct tdagent_thread *rec)
{
    struct tdagent_list *head = &__tdagent_thread_list;
    struct tdagent_list *tail = head->prev;
    rec->list.next = head;
    rec->list.prev = tail;
    head->prev = &rec->list;
    __atomic_store_n(&tail->next, &rec->list, __ATOMIC_RELEASE);
}

/* The removed record keeps its own `next`, so a reader standing on it
 * continues along the list. */
static void list_remove_locked(struct tdagent_thread *rec)
{
    struct tdagent_list *next = rec->list.next;
    struct tdagent_list *prev = rec->list.prev;
    if (next == NULL || prev == NULL)
        return;
    next->prev = prev;
    __atomic_store_n(&prev->next, next, __ATOMIC_RELEASE);
    rec->list.prev = NULL;
}

void tdagent_registry_add_live(struct tdagent_thread *rec)
{
    tdagent_lock_acquire(&registry_lock);
    map_insert_locked(rec, rec->pthread);
    list_append_locked(rec);
    rec->birth_nthreads = __atomic_add_fetch(&__tdagent_nthreads, 1, __ATOMIC_ACQ_REL);
    tdagent_lock_release(&registry_lock);
}

void tdagent_registry_publish(struct tdagent_thread *rec, pthread_t thread)
{
    tdagent_lock_acquire(&registry_lock);
    map_insert_locked(rec, thread);
    tdagent_lock_release(&registry_lock);
}

struct tdagent_thread *tdagent_registry_find(pthread_t thread)
{
    struct tdagent_thread *found = NULL;
    tdagent_lock_acquire(&registry_lock);
    for (struct tdagent_thread *rec = map[bucket_of(thread)]; rec != NULL; rec = rec->hash_next) {
        if (rec->pthread == thread) {
            __atomic_add_fetch(&rec->refs, 1, __ATOMIC_ACQ_REL);
            found = rec;
            break;
        }
    }
    tdagent_lock_release(&registry_lock);
    return found;
}

int tdagent_registry_remove_live(struct tdagent_thread *rec)
{
    tdagent_lock_acquire(&registry_lock);
    list_remove_locked(rec);
    int n = __atomic_sub_fetch(&__tdagent_nthreads, 1, __ATOMIC_ACQ_REL);
    tdagent_lock_release(&registry_lock);
    return n;
}

void tdagent_registry_unmap(struct tdagent_thread *rec)
{
    tdagent_lock_acquire(&registry_lock);
    map_remove_locked(rec);
    tdagent_lock_release(&registry_lock);
}

void tdagent_registry_before_fork(void)
{
    tdagent_lock_acquire(&registry_lock);
}

void tdagent_registry_after_fork_parent(void)
{
    tdagent_lock_release(&registry_lock);
}

/* The child has one thread: every other record leaves the live list (it is
 * kept in the map, so a join on a pre-fork pthread_t still finds memory). */
void tdagent_registry_after_fork_child(struct tdagent_thread *self)
{
    registry_lock.word = 0;
    struct tdagent_list *head = &__tdagent_thread_list;
    struct tdagent_list *cur = head->next;
    while (cur != head && cur != NULL) {
        struct tdagent_list *next = cur->next;
        struct tdagent_thread *rec = (struct tdagent_thread *)((char *)cur - offsetof(struct tdagent_thread, list));
        if (rec != self) {
            list_remove_locked(rec);
            rec->tid = 0;
        }
        cur = next;
    }
    __tdagent_nthreads = self == &tdagent_unregistered ? 0 : 1;
}
