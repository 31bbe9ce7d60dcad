/* _lwp_info (Solaris): the calling LWP's user and system time.
 *
 * Source: getrusage(RUSAGE_THREAD). The kernel computes it from the thread's
 * exact runtime (sum_exec_runtime, what CLOCK_THREAD_CPUTIME_ID reads) split
 * by the sampled utime:stime tick ratio, so the two add up to the CPU clock
 * (to the microsecond) and each is monotonic. One syscall, async-signal-safe,
 * like the Solaris call. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "safe_copy.h"
#include "tdagent_internal.h"

TDAGENT_EXPORT int _lwp_info(struct lwpinfo *buffer)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return errno;
    struct lwpinfo info;
    memset(&info, 0, sizeof info);
    info.lwp_utime.tv_sec = ru.ru_utime.tv_sec;
    info.lwp_utime.tv_nsec = ru.ru_utime.tv_usec * 1000L;
    info.lwp_stime.tv_sec = ru.ru_stime.tv_sec;
    info.lwp_stime.tv_nsec = ru.ru_stime.tv_usec * 1000L;
    /* No EOVERFLOW: tv_sec is a 64-bit time_t. */
    _Static_assert(sizeof(time_t) >= 8, "EOVERFLOW would be possible with a 32-bit time_t");
    return tdagent_copy_out(buffer, &info, sizeof info);
}
