#include "glibc_event_macros.h"

/* Each of these must expand glibc's macro, not call anything of ours. */
#if !defined(td_event_emptyset) || !defined(td_event_fillset) || !defined(td_event_addset) || \
    !defined(td_event_delset) || !defined(td_eventismember) || !defined(td_eventisempty)
#error "<thread_db.h> no longer defines the event-set macros; the oracle needs another source"
#endif

void glibc_event_emptyset(td_thr_events_t *set) { td_event_emptyset(set); }
void glibc_event_fillset(td_thr_events_t *set) { td_event_fillset(set); }
void glibc_event_addset(td_thr_events_t *set, int n) { td_event_addset(set, n); }
void glibc_event_delset(td_thr_events_t *set, int n) { td_event_delset(set, n); }
uint32_t glibc_eventismember(const td_thr_events_t *set, int n) { return td_eventismember(set, n); }
int glibc_eventisempty(const td_thr_events_t *set) { return td_eventisempty(set); }
int glibc_eventsize(void) { return TD_EVENTSIZE; }
