/* Calls pthread_getrusage_np(COLLECT) on itself without START and prints
 * "collect=<result>": 0 when AIXTHREAD_ENRUSG=ON enabled collection at load,
 * ENOSYS otherwise. Linked with libtdagent. */
#include <pthread.h>
#include <stdio.h>

#include "tdagent.h"

int main(void)
{
    struct rusage ru;
    int r = pthread_getrusage_np(pthread_self(), &ru, PTHRDSINFO_RUSAGE_COLLECT);
    printf("collect=%d\n", r);
    return 0;
}
