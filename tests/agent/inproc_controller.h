/* inproc_controller — a controller for libtdagent that lives inside the
 * target, for tests that run without tdctl.
 *
 * It reads the protocol the way core/ does: symbols by name (dlsym), the
 * record layout from the _tdagent_db_* descriptors, never from the agent's
 * headers. When armed it writes `cc c3` over each reporting function through
 * /proc/self/mem (what the real controller writes through /proc/PID/mem); a
 * SIGTRAP handler then plays the controller's stop: it logs (event, subject,
 * buffer, tid), consumes the subject's message (td_thr_event_getmsg), and,
 * when following, enables each new thread at its TD_CREATE — the handshake
 * holds the new thread there, as with tdctl.
 *
 * Auto mode, for programs that know nothing about it: preload it after the
 * agent with TDAGENT_INPROC_OUT=FILE in the environment; it then enables the
 * initial thread, sets the global mask to every event, arms with following,
 * and at exit writes one line of counts to FILE:
 *   "TD_READY=3 TD_SLEEP=3 ... TD_TIMEOUT=0\n"
 *
 * Plain C so it can be preloaded into python3, node or java. */
#ifndef TDAGENT_INPROC_CONTROLLER_H
#define TDAGENT_INPROC_CONTROLLER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <thread_db.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One reporting-function hit, as the controller saw it at the stop. */
typedef struct tdi_entry {
    int event;          /* td_event_e of the function that trapped */
    uintptr_t subject;  /* rdi at the trap: the record holding the message */
    int eventnum;       /* subject's eventnum at the trap */
    uintptr_t eventdata;
    pid_t tid;          /* the LWP that hit the trap */
} tdi_entry;

/* Finds the agent's symbols and descriptors. 0, or -1 (see tdi_error). */
int tdi_init(void);
const char *tdi_error(void);

/* Records. */
uintptr_t tdi_record_of(pid_t tid); /* the live record with this tid, or 0 */
uintptr_t tdi_self(void);           /* the calling thread's record, or 0 */
int tdi_report_events(uintptr_t rec);
void tdi_set_report_events(uintptr_t rec, int on);
void tdi_thread_mask(uintptr_t rec, td_thr_events_t *out);
void tdi_set_thread_mask(uintptr_t rec, const td_thr_events_t *mask);
int tdi_eventnum(uintptr_t rec);
uintptr_t tdi_eventdata(uintptr_t rec);
uintptr_t tdi_nextevent(uintptr_t rec);
pid_t tdi_tid(uintptr_t rec);
uintptr_t tdi_start_routine(uintptr_t rec);

/* Variables. */
void tdi_global_mask(td_thr_events_t *out);
void tdi_set_global_mask(const td_thr_events_t *mask);
int tdi_nthreads(void);
int tdi_concurrency(void);

/* Lists, head first; return the number stored (at most max). The message
 * list stops at a cycle. */
size_t tdi_message_list(uintptr_t *out, size_t max);
size_t tdi_thread_list(uintptr_t *out, size_t max);

/* td_thr_event_getmsg: consumes rec's message (buffer emptied, record
 * unlinked from the message list wherever it is). 0, or -1 when empty. */
int tdi_getmsg(uintptr_t rec, int *eventnum, uintptr_t *eventdata);
/* Consumes every queued message. Only while no thread reports. */
void tdi_drain(void);

/* Reporting functions. */
uintptr_t tdi_event_address(int event); /* 0 when the agent has none */
size_t tdi_event_size(int event);       /* st_size of the function */

/* Traps. tdi_arm: 0, or -1 (tdi_error). follow: enable new threads at
 * TD_CREATE. tdi_disarm puts the original bytes back. */
int tdi_arm(int follow);
void tdi_disarm(void);

/* The log of trap hits since the last clear (capacity 65536). */
size_t tdi_log_size(void);
const tdi_entry *tdi_log_entry(size_t i);
void tdi_log_clear(void);
unsigned long tdi_count(int event);

#ifdef __cplusplus
}
#endif

#endif
