/*
 * LD_PRELOAD shim for tdctl (not for targets): waitpid() as a badly loaded
 * host or an unusual kernel may answer it. TDCTL_SHIM_WAIT selects:
 *   delay   every waitpid() call takes 20 ms longer;
 *   sparse  a non-blocking waitpid() (WNOHANG) reports a status at most once
 *           per 100 ms and answers "nothing" otherwise, although a status is
 *           waiting (its SIGCHLD has already been sent);
 * anything else, or unset: no change.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

pid_t waitpid(pid_t pid, int *status, int options)
{
    static pid_t (*real)(pid_t, int *, int);
    static long long last_report_ms;
    if (!real)
        real = (pid_t(*)(pid_t, int *, int))dlsym(RTLD_NEXT, "waitpid");
    const char *mode = getenv("TDCTL_SHIM_WAIT");
    if (mode && strcmp(mode, "delay") == 0) {
        struct timespec d = {0, 20 * 1000 * 1000};
        nanosleep(&d, NULL);
        return real(pid, status, options);
    }
    if (mode && strcmp(mode, "sparse") == 0 && (options & WNOHANG)) {
        if (now_ms() - last_report_ms < 100)
            return 0;
        pid_t r = real(pid, status, options);
        if (r > 0)
            last_report_ms = now_ms();
        return r;
    }
    return real(pid, status, options);
}
