/* glibc's event-set macros from <thread_db.h>, wrapped as functions in a
   separately compiled C file, so the tests can run them next to ours (our
   header removes the macros from every C++ file that includes it). */
#ifndef TDCTL_TEST_GLIBC_EVENT_MACROS_H
#define TDCTL_TEST_GLIBC_EVENT_MACROS_H

#include <stdint.h>

#include <thread_db.h>

#ifdef __cplusplus
extern "C" {
#endif

void glibc_event_emptyset(td_thr_events_t *set);
void glibc_event_fillset(td_thr_events_t *set);
void glibc_event_addset(td_thr_events_t *set, int n);
void glibc_event_delset(td_thr_events_t *set, int n);
/* The macro's raw value: the member's bit, or 0. */
uint32_t glibc_eventismember(const td_thr_events_t *set, int n);
int glibc_eventisempty(const td_thr_events_t *set);
/* TD_EVENTSIZE as glibc's header sees it, to check our layout assumption. */
int glibc_eventsize(void);

#ifdef __cplusplus
}
#endif

#endif
