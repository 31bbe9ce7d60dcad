/* The initial thread ends with pthread_exit while a watcher thread checks
 * that it reported TD_DEATH about itself. Exit status: 0 when it did, 2..5
 * naming what was wrong. A program of its own because pthread_exit unwinds
 * the initial thread's whole stack, which a test framework's frames would
 * catch. Linked with libtdagent and the in-process controller. */
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>

#include "inproc_controller.h"

static uintptr_t main_record;

static void *watch(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5000 && tdi_tid(main_record) != 0; ++i)
        usleep(1000);
    if (tdi_tid(main_record) != 0)
        _exit(2);
    if (tdi_eventnum(main_record) != TD_DEATH)
        _exit(3);
    if (tdi_eventdata(main_record) != main_record)
        _exit(4);
    if (tdi_nthreads() != 1)
        _exit(5);
    _exit(0);
}

int main(void)
{
    if (tdi_init() != 0 || (main_record = tdi_self()) == 0 || tdi_tid(main_record) != getpid())
        return 1;
    td_thr_events_t death;
    td_event_emptyset(&death);
    td_event_addset(&death, TD_DEATH);
    tdi_set_thread_mask(main_record, &death);
    tdi_set_report_events(main_record, 1);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, watch, NULL) != 0)
        return 1;
    pthread_exit(NULL);
}
