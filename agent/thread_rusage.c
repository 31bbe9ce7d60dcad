/* pthread_getrusage_np (AIX): per-thread resource usage from inside the
 * process. The calling thread reads getrusage(RUSAGE_THREAD); another thread
 * is read from /proc/self/task/TID — the same Linux sources tdctl's
 * `rusage` command reads from outside (SPEC §7). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "safe_copy.h"
#include "tdagent_internal.h"

static int collection_enabled;

void tdagent_rusage_init_from_env(void)
{
    const char *v = getenv("AIXTHREAD_ENRUSG");
    if (v != NULL && strcasecmp(v, "ON") == 0)
        __atomic_store_n(&collection_enabled, 1, __ATOMIC_RELAXED);
}

/* The whole (small) file, NUL-terminated; its length, or -1. */
static ssize_t read_small_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t used = 0;
    while (used + 1 < size) {
        ssize_t n = read(fd, buf + used, size - 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        used += (size_t)n;
    }
    close(fd);
    buf[used] = '\0';
    return (ssize_t)used;
}

/* The number after "key" (e.g. "voluntary_ctxt_switches:") at the start of a
 * line, or 0 when absent. */
static long long field_after(const char *text, const char *key)
{
    size_t len = strlen(key);
    for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, len) == 0)
            return strtoll(p + len, NULL, 10);
    }
    return 0;
}

static struct timeval ticks_to_timeval(unsigned long long ticks, long hz)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ticks / (unsigned long long)hz);
    tv.tv_usec = (suseconds_t)((ticks % (unsigned long long)hz) * 1000000ULL / (unsigned long long)hz);
    return tv;
}

/* /proc/self/task/TID/{stat,status,io} and /proc/self/status. Returns 0 or
 * ESRCH when the task is gone. */
static int collect_from_proc(pid_t tid, struct rusage *ru)
{
    char path[64], buf[4096];

    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    if (read_small_file(path, buf, sizeof buf) <= 0)
        return ESRCH;
    /* Fields after the command name, which may itself contain ") ". */
    const char *p = strrchr(buf, ')');
    if (p == NULL)
        return ESRCH;
    unsigned long long field[16] = {0}; /* field[k] is stat field k + 3 */
    p += 1;
    for (int k = 0; k < 16 && *p != '\0'; ++k) {
        while (*p == ' ')
            ++p;
        field[k] = k == 0 ? 0 : strtoull(p, NULL, 10); /* field 3 is the state letter */
        while (*p != ' ' && *p != '\0')
            ++p;
    }
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    ru->ru_minflt = (long)field[10 - 3];
    ru->ru_majflt = (long)field[12 - 3];
    ru->ru_utime = ticks_to_timeval(field[14 - 3], hz);
    ru->ru_stime = ticks_to_timeval(field[15 - 3], hz);

    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    if (read_small_file(path, buf, sizeof buf) > 0) {
        ru->ru_nvcsw = field_after(buf, "voluntary_ctxt_switches:");
        ru->ru_nivcsw = field_after(buf, "nonvoluntary_ctxt_switches:");
    }
    snprintf(path, sizeof path, "/proc/self/task/%d/io", (int)tid);
    if (read_small_file(path, buf, sizeof buf) > 0) {
        ru->ru_inblock = field_after(buf, "read_bytes:") / 512;
        ru->ru_oublock = field_after(buf, "write_bytes:") / 512;
    }
    if (read_small_file("/proc/self/status", buf, sizeof buf) > 0)
        ru->ru_maxrss = field_after(buf, "VmHWM:");
    return 0;
}

TDAGENT_EXPORT int pthread_getrusage_np(pthread_t ptid, struct rusage *rusage, int mode)
{
    switch (mode) {
    case PTHRDSINFO_RUSAGE_START:
        __atomic_store_n(&collection_enabled, 1, __ATOMIC_RELEASE);
        return 0;
    case PTHRDSINFO_RUSAGE_STOP:
        __atomic_store_n(&collection_enabled, 0, __ATOMIC_RELEASE);
        return 0;
    case PTHRDSINFO_RUSAGE_COLLECT:
        break;
    default:
        return EINVAL;
    }
    if (rusage == NULL || ptid == 0)
        return EINVAL;
    if (!__atomic_load_n(&collection_enabled, __ATOMIC_ACQUIRE))
        return ENOSYS;

    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (pthread_equal(ptid, pthread_self())) {
        int saved = errno;
        if (getrusage(RUSAGE_THREAD, &ru) != 0) {
            int err = errno;
            errno = saved;
            return err;
        }
        ru.ru_nsignals = (long)__atomic_load_n(&tdagent_self->nsignals, __ATOMIC_RELAXED);
    } else {
        struct tdagent_thread *rec = tdagent_registry_find(ptid);
        if (rec == NULL)
            return ESRCH;
        pid_t tid = __atomic_load_n(&rec->tid, __ATOMIC_ACQUIRE);
        int err = tid == 0 ? ESRCH : collect_from_proc(tid, &ru);
        ru.ru_nsignals = (long)__atomic_load_n(&rec->nsignals, __ATOMIC_RELAXED);
        tdagent_registry_release(rec);
        if (err != 0)
            return err;
    }
    /* "Not valid" is EINVAL in the seed; a bad address is found by copying. */
    return tdagent_copy_out(rusage, &ru, sizeof ru) == 0 ? 0 : EINVAL;
}
