/* See inproc_controller.h. */
#define _GNU_SOURCE
#include "inproc_controller.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

enum { event_slots = 16, log_capacity = 65536, max_walk = 1 << 17 };

static const char *const function_names[event_slots] = {
    [TD_READY] = "__tdagent_event_ready",       [TD_SLEEP] = "__tdagent_event_sleep",
    [TD_LOCK_TRY] = "__tdagent_event_lock_try", [TD_CATCHSIG] = "__tdagent_event_catchsig",
    [TD_CREATE] = "__tdagent_event_create",     [TD_DEATH] = "__tdagent_event_death",
    [TD_PRI_INHERIT] = "__tdagent_event_pri_inherit", [TD_REAP] = "__tdagent_event_reap",
    [TD_CONCURRENCY] = "__tdagent_event_concurrency", [TD_TIMEOUT] = "__tdagent_event_timeout",
};

static const char *const event_names[event_slots] = {
    [TD_READY] = "TD_READY",       [TD_SLEEP] = "TD_SLEEP",     [TD_SWITCHTO] = "TD_SWITCHTO",
    [TD_SWITCHFROM] = "TD_SWITCHFROM", [TD_LOCK_TRY] = "TD_LOCK_TRY", [TD_CATCHSIG] = "TD_CATCHSIG",
    [TD_IDLE] = "TD_IDLE",         [TD_CREATE] = "TD_CREATE",   [TD_DEATH] = "TD_DEATH",
    [TD_PREEMPT] = "TD_PREEMPT",   [TD_PRI_INHERIT] = "TD_PRI_INHERIT", [TD_REAP] = "TD_REAP",
    [TD_CONCURRENCY] = "TD_CONCURRENCY", [TD_TIMEOUT] = "TD_TIMEOUT",
};

/* Where things are, from the agent's descriptors and symbols. */
static struct {
    int ready;
    uint32_t report_events, eventmask, eventnum, eventdata, nextevent, tid, start_routine, list, list_next;
    uint32_t report_events_bytes, eventnum_bytes;
    td_thr_events_t *global_mask;
    uintptr_t *last_event;
    uintptr_t thread_list;
    int *nthreads;
    int *concurrency;
    uintptr_t function[event_slots];
    size_t function_size[event_slots];
} L;

static char error_text[256];
static int armed;
static int following;
static unsigned char saved_bytes[event_slots][2];
static struct sigaction previous_trap_action;
static int (*libc_sigaction)(int, const struct sigaction *, struct sigaction *);

static tdi_entry log_entries[log_capacity];
static size_t log_used;
static unsigned long counts[event_slots];
static int list_lock;

static void set_error(const char *what, const char *name)
{
    snprintf(error_text, sizeof error_text, "%s%s%s", what, name ? ": " : "", name ? name : "");
}

const char *tdi_error(void)
{
    return error_text;
}

/* {bits, count, offset} -> offset; *bytes gets the element size. */
static int descriptor(const char *name, uint32_t *offset, uint32_t *bytes)
{
    char symbol[96];
    snprintf(symbol, sizeof symbol, "_tdagent_db_%s", name);
    const uint32_t *d = dlsym(RTLD_DEFAULT, symbol);
    if (d == NULL) {
        set_error("missing descriptor", symbol);
        return -1;
    }
    *offset = d[2];
    if (bytes != NULL)
        *bytes = d[0] / 8;
    return 0;
}

static void *variable(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (p == NULL)
        set_error("missing variable", name);
    return p;
}

int tdi_init(void)
{
    if (L.ready)
        return 0;
    if (dlsym(RTLD_DEFAULT, "__tdagent_version") == NULL) {
        set_error("libtdagent.so is not loaded (no __tdagent_version)", NULL);
        return -1;
    }
    uint32_t eventbuf, eventnum_in_buf, eventdata_in_buf;
    if (descriptor("pthread_report_events", &L.report_events, &L.report_events_bytes) ||
        descriptor("pthread_eventbuf", &eventbuf, NULL) ||
        descriptor("pthread_eventbuf_eventmask", &L.eventmask, NULL) ||
        descriptor("td_eventbuf_t_eventnum", &eventnum_in_buf, &L.eventnum_bytes) ||
        descriptor("td_eventbuf_t_eventdata", &eventdata_in_buf, NULL) ||
        descriptor("pthread_nextevent", &L.nextevent, NULL) || descriptor("pthread_tid", &L.tid, NULL) ||
        descriptor("pthread_start_routine", &L.start_routine, NULL) ||
        descriptor("pthread_list", &L.list, NULL) || descriptor("list_t_next", &L.list_next, NULL))
        return -1;
    L.eventnum = eventbuf + eventnum_in_buf;
    L.eventdata = eventbuf + eventdata_in_buf;
    if (!(L.global_mask = variable("__tdagent_threads_events")) || !(L.last_event = variable("__tdagent_last_event")) ||
        !(L.thread_list = (uintptr_t)variable("__tdagent_thread_list")) ||
        !(L.nthreads = variable("__tdagent_nthreads")) || !(L.concurrency = variable("__tdagent_concurrency")))
        return -1;
    for (int e = 0; e < event_slots; ++e) {
        if (function_names[e] == NULL)
            continue;
        void *f = dlsym(RTLD_DEFAULT, function_names[e]);
        if (f == NULL) {
            set_error("missing reporting function", function_names[e]);
            return -1;
        }
        Dl_info info;
        const ElfW(Sym) *sym = NULL;
        L.function[e] = (uintptr_t)f;
        if (dladdr1(f, &info, (void **)&sym, RTLD_DL_SYMENT) != 0 && sym != NULL)
            L.function_size[e] = sym->st_size;
    }
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (libc != NULL)
        libc_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(libc, "sigaction");
    if (libc_sigaction == NULL) {
        set_error("cannot find libc's own sigaction", NULL);
        return -1;
    }
    L.ready = 1;
    return 0;
}

/* ---- record fields ------------------------------------------------------ */

#define FIELD(rec, off, type) ((type *)((rec) + (off)))

uintptr_t tdi_record_of(pid_t tid)
{
    uintptr_t head = L.thread_list;
    uintptr_t cur = __atomic_load_n(FIELD(head, L.list_next, uintptr_t), __ATOMIC_ACQUIRE);
    for (int steps = 0; cur != 0 && cur != head && steps < max_walk; ++steps) {
        uintptr_t rec = cur - L.list;
        if (__atomic_load_n(FIELD(rec, L.tid, pid_t), __ATOMIC_ACQUIRE) == tid)
            return rec;
        cur = __atomic_load_n(FIELD(cur, L.list_next, uintptr_t), __ATOMIC_ACQUIRE);
    }
    return 0;
}

uintptr_t tdi_self(void)
{
    return tdi_record_of(gettid());
}

int tdi_report_events(uintptr_t rec)
{
    return __atomic_load_n(FIELD(rec, L.report_events, unsigned char), __ATOMIC_ACQUIRE) != 0;
}

void tdi_set_report_events(uintptr_t rec, int on)
{
    __atomic_store_n(FIELD(rec, L.report_events, unsigned char), on ? 1 : 0, __ATOMIC_RELEASE);
}

void tdi_thread_mask(uintptr_t rec, td_thr_events_t *out)
{
    memcpy(out, (void *)(rec + L.eventmask), sizeof *out);
}

void tdi_set_thread_mask(uintptr_t rec, const td_thr_events_t *mask)
{
    memcpy((void *)(rec + L.eventmask), mask, sizeof *mask);
}

int tdi_eventnum(uintptr_t rec)
{
    return __atomic_load_n(FIELD(rec, L.eventnum, int), __ATOMIC_ACQUIRE);
}

uintptr_t tdi_eventdata(uintptr_t rec)
{
    return __atomic_load_n(FIELD(rec, L.eventdata, uintptr_t), __ATOMIC_ACQUIRE);
}

uintptr_t tdi_nextevent(uintptr_t rec)
{
    return __atomic_load_n(FIELD(rec, L.nextevent, uintptr_t), __ATOMIC_ACQUIRE);
}

pid_t tdi_tid(uintptr_t rec)
{
    return __atomic_load_n(FIELD(rec, L.tid, pid_t), __ATOMIC_ACQUIRE);
}

uintptr_t tdi_start_routine(uintptr_t rec)
{
    return *FIELD(rec, L.start_routine, uintptr_t);
}

void tdi_global_mask(td_thr_events_t *out)
{
    memcpy(out, L.global_mask, sizeof *out);
}

void tdi_set_global_mask(const td_thr_events_t *mask)
{
    for (int i = 0; i < TD_EVENTSIZE; ++i)
        __atomic_store_n(&L.global_mask->event_bits[i], mask->event_bits[i], __ATOMIC_RELEASE);
}

int tdi_nthreads(void)
{
    return __atomic_load_n(L.nthreads, __ATOMIC_ACQUIRE);
}

int tdi_concurrency(void)
{
    return __atomic_load_n(L.concurrency, __ATOMIC_ACQUIRE);
}

size_t tdi_message_list(uintptr_t *out, size_t max)
{
    size_t n = 0;
    uintptr_t cur = __atomic_load_n(L.last_event, __ATOMIC_ACQUIRE);
    for (int steps = 0; cur != 0 && steps < max_walk; ++steps) {
        for (size_t i = 0; i < n; ++i)
            if (out[i] == cur)
                return n; /* a cycle */
        if (n == max)
            return n;
        out[n++] = cur;
        cur = tdi_nextevent(cur);
    }
    return n;
}

size_t tdi_thread_list(uintptr_t *out, size_t max)
{
    size_t n = 0;
    uintptr_t head = L.thread_list;
    uintptr_t cur = __atomic_load_n(FIELD(head, L.list_next, uintptr_t), __ATOMIC_ACQUIRE);
    for (int steps = 0; cur != 0 && cur != head && steps < max_walk && n < max; ++steps) {
        out[n++] = cur - L.list;
        cur = __atomic_load_n(FIELD(cur, L.list_next, uintptr_t), __ATOMIC_ACQUIRE);
    }
    return n;
}

/* ---- consuming ---------------------------------------------------------- */

static void spin_lock(int *l)
{
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(l, __ATOMIC_RELAXED))
            __builtin_ia32_pause();
}

static void spin_unlock(int *l)
{
    __atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/* Removes rec from the message list. Reporters only ever CAS the head and
 * write their own record's link, so a predecessor's link can be rewritten
 * here while they push; consumers exclude each other with list_lock. */
static void unlink_locked(uintptr_t rec)
{
    uintptr_t succ = tdi_nextevent(rec);
    for (;;) {
        uintptr_t head = __atomic_load_n(L.last_event, __ATOMIC_ACQUIRE);
        if (head == rec) {
            if (__atomic_compare_exchange_n(L.last_event, &head, succ, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                break;
            continue; /* somebody pushed: rec is no longer the head */
        }
        uintptr_t prev = head;
        for (int steps = 0; prev != 0 && steps < max_walk; ++steps) {
            uintptr_t next = tdi_nextevent(prev);
            if (next == rec) {
                __atomic_store_n(FIELD(prev, L.nextevent, uintptr_t), succ, __ATOMIC_RELEASE);
                break;
            }
            prev = next;
        }
        break;
    }
    __atomic_store_n(FIELD(rec, L.nextevent, uintptr_t), 0, __ATOMIC_RELEASE);
}

/* Called with every signal blocked (handler or tdi_getmsg). */
static int getmsg_blocked(uintptr_t rec, int *eventnum, uintptr_t *eventdata)
{
    spin_lock(&list_lock);
    int num = tdi_eventnum(rec);
    uintptr_t data = tdi_eventdata(rec);
    if (num != TD_EVENT_NONE) {
        unlink_locked(rec);
        __atomic_store_n(FIELD(rec, L.eventdata, uintptr_t), 0, __ATOMIC_RELEASE);
        __atomic_store_n(FIELD(rec, L.eventnum, int), TD_EVENT_NONE, __ATOMIC_RELEASE);
    }
    spin_unlock(&list_lock);
    if (num == TD_EVENT_NONE)
        return -1;
    if (eventnum)
        *eventnum = num;
    if (eventdata)
        *eventdata = data;
    return 0;
}

int tdi_getmsg(uintptr_t rec, int *eventnum, uintptr_t *eventdata)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int r = getmsg_blocked(rec, eventnum, eventdata);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

void tdi_drain(void)
{
    uintptr_t rec;
    while ((rec = __atomic_load_n(L.last_event, __ATOMIC_ACQUIRE)) != 0) {
        if (tdi_getmsg(rec, NULL, NULL) != 0) {
            /* On the list with an empty buffer (consumed elsewhere): unlink. */
            spin_lock(&list_lock);
            unlink_locked(rec);
            spin_unlock(&list_lock);
        }
    }
}

/* ---- traps -------------------------------------------------------------- */

uintptr_t tdi_event_address(int event)
{
    return event >= 0 && event < event_slots ? L.function[event] : 0;
}

size_t tdi_event_size(int event)
{
    return event >= 0 && event < event_slots ? L.function_size[event] : 0;
}

static void on_trap(int sig, siginfo_t *info, void *context)
{
    ucontext_t *uc = context;
    uintptr_t site = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 1;
    int event = 0;
    for (int e = 0; e < event_slots; ++e)
        if (L.function[e] != 0 && L.function[e] == site)
            event = e;
    if (event == 0 || !armed) {
        if (previous_trap_action.sa_flags & SA_SIGINFO) {
            if (previous_trap_action.sa_sigaction != NULL)
                previous_trap_action.sa_sigaction(sig, info, context);
        } else if (previous_trap_action.sa_handler != SIG_DFL && previous_trap_action.sa_handler != SIG_IGN) {
            previous_trap_action.sa_handler(sig);
        }
        return;
    }
    uintptr_t subject = (uintptr_t)uc->uc_mcontext.gregs[REG_RDI];
    tdi_entry entry = {event, subject, TD_EVENT_NONE, 0, gettid()};
    getmsg_blocked(subject, &entry.eventnum, &entry.eventdata);
    if (event == TD_CREATE && following)
        tdi_set_report_events(subject, 1); /* the new thread waits in the handshake */
    size_t slot = __atomic_fetch_add(&log_used, 1, __ATOMIC_ACQ_REL);
    if (slot < log_capacity)
        log_entries[slot] = entry;
    __atomic_add_fetch(&counts[event], 1, __ATOMIC_RELAXED);
}

/* Through /proc/self/mem, as the controller writes /proc/PID/mem; where the
 * kernel refuses forced writes without ptrace (proc_mem.force_override),
 * by making the page writable for a moment. */
static int write_own_memory(uintptr_t address, const unsigned char *bytes, size_t n)
{
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t w = pwrite(fd, bytes, n, (off_t)address);
        close(fd);
        if (w == (ssize_t)n)
            return 0;
    }
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = address & ~(page - 1);
    size_t len = (address + n - start + page - 1) & ~(page - 1);
    if (mprotect((void *)start, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return -1;
    memcpy((void *)address, bytes, n);
    __builtin___clear_cache((char *)address, (char *)address + n);
    return mprotect((void *)start, len, PROT_READ | PROT_EXEC);
}

int tdi_arm(int follow)
{
    if (tdi_init() != 0)
        return -1;
    if (armed) {
        following = follow;
        return 0;
    }
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_trap;
    act.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&act.sa_mask);
    if (libc_sigaction(SIGTRAP, &act, &previous_trap_action) != 0) {
        set_error("cannot install the SIGTRAP handler", strerror(errno));
        return -1;
    }
    following = follow;
    armed = 1;
    for (int e = 0; e < event_slots; ++e) {
        if (L.function[e] == 0)
            continue;
        const unsigned char *code = (const unsigned char *)L.function[e];
        memcpy(saved_bytes[e], code, 2);
        if (code[0] != 0xc3 || L.function_size[e] != 1) {
            set_error("reporting function is not a one-byte ret", function_names[e]);
            tdi_disarm();
            return -1;
        }
        static const unsigned char patch[2] = {0xcc, 0xc3};
        if (write_own_memory(L.function[e], patch, 2) != 0) {
            set_error("cannot write /proc/self/mem", strerror(errno));
            tdi_disarm();
            return -1;
        }
    }
    return 0;
}

void tdi_disarm(void)
{
    if (!armed)
        return;
    for (int e = 0; e < event_slots; ++e)
        if (L.function[e] != 0 && saved_bytes[e][0] == 0xc3)
            write_own_memory(L.function[e], saved_bytes[e], 2);
    armed = 0;
    following = 0;
    libc_sigaction(SIGTRAP, &previous_trap_action, NULL);
}

size_t tdi_log_size(void)
{
    size_t n = __atomic_load_n(&log_used, __ATOMIC_ACQUIRE);
    return n < log_capacity ? n : log_capacity;
}

const tdi_entry *tdi_log_entry(size_t i)
{
    return i < tdi_log_size() ? &log_entries[i] : NULL;
}

void tdi_log_clear(void)
{
    __atomic_store_n(&log_used, 0, __ATOMIC_RELEASE);
    for (int e = 0; e < event_slots; ++e)
        __atomic_store_n(&counts[e], 0, __ATOMIC_RELEASE);
}

unsigned long tdi_count(int event)
{
    return event >= 0 && event < event_slots ? __atomic_load_n(&counts[event], __ATOMIC_ACQUIRE) : 0;
}

/* ---- auto mode ---------------------------------------------------------- */

static const char *auto_out;

__attribute__((constructor)) static void auto_start(void)
{
    auto_out = getenv("TDAGENT_INPROC_OUT");
    if (auto_out == NULL)
        return;
    if (tdi_init() != 0 || tdi_self() == 0) {
        fprintf(stderr, "inproc_controller: %s\n", tdi_self() == 0 ? "no record for the initial thread" : tdi_error());
        auto_out = NULL;
        return;
    }
    td_thr_events_t all;
    td_event_fillset(&all);
    tdi_set_global_mask(&all);
    if (tdi_arm(1) != 0) {
        fprintf(stderr, "inproc_controller: %s\n", tdi_error());
        auto_out = NULL;
        return;
    }
    tdi_set_report_events(tdi_self(), 1);
}

__attribute__((destructor)) static void auto_finish(void)
{
    if (auto_out == NULL)
        return;
    /* Stop reporting first: what runs after this destructor must not trap
     * into a handler whose library is being unloaded. */
    td_thr_events_t none;
    td_event_emptyset(&none);
    tdi_set_global_mask(&none);
    tdi_disarm();
    FILE *f = fopen(auto_out, "w");
    if (f == NULL)
        return;
    for (int e = TD_MIN_EVENT_NUM; e <= TD_MAX_EVENT_NUM; ++e)
        fprintf(f, "%s=%lu%s", event_names[e], tdi_count(e), e == TD_MAX_EVENT_NUM ? "\n" : " ");
    fclose(f);
}
