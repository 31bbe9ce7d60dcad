/* The exec family. While a controller streams with threads born meanwhile
 * left untraced (TDAGENT_STREAM_WAITS), an exec from such a thread would
 * replace the process behind the controller's back: the kernel reports an
 * exec to the exec'ing thread's tracer, and it has none. Each wrapper first
 * has the thread seized (tdagent_before_exec), then calls the next
 * definition. The execl* forms build their argument vector here and go
 * through the execv* wrappers' next definitions, as libc's own do. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include "tdagent_internal.h"

/* The next definitions are resolved with the others, at the agent's start
 * (real_functions.c): nothing is looked up at the exec, which may run in a
 * vfork child that shares its parent's memory. */
TDAGENT_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    tdagent_before_exec();
    return tdagent_real.execve(path, argv, envp);
}

TDAGENT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    tdagent_before_exec();
    return tdagent_real.execvpe(file, argv, envp);
}

TDAGENT_EXPORT int execv(const char *path, char *const argv[])
{
    tdagent_before_exec();
    return tdagent_real.execv(path, argv);
}

TDAGENT_EXPORT int execvp(const char *file, char *const argv[])
{
    tdagent_before_exec();
    return tdagent_real.execvp(file, argv);
}

TDAGENT_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    tdagent_before_exec();
    return tdagent_real.fexecve(fd, argv, envp);
}

/* The arguments of an execl* call after `first`, up to its NULL. */
static size_t count_args(va_list ap)
{
    size_t n = 0;
    while (va_arg(ap, const char *) != NULL)
        ++n;
    return n;
}

enum exec_list_kind { by_path, by_search, with_environment };

/* An execl* call: `arg` and the variadic arguments in `ap` (up to their
 * NULL, then for execle the environment) as a vector, to the matching
 * execv* wrapper. */
static int exec_list(enum exec_list_kind kind, const char *file, const char *arg, va_list ap)
{
    va_list counting;
    va_copy(counting, ap);
    const size_t n = count_args(counting);
    va_end(counting);
    char *argv[n + 2];
    argv[0] = (char *)arg;
    for (size_t i = 1; i <= n + 1; ++i)
        argv[i] = va_arg(ap, char *);
    switch (kind) {
    case by_search: return execvp(file, argv);
    case with_environment: return execve(file, argv, va_arg(ap, char *const *));
    case by_path: break;
    }
    return execv(file, argv);
}

TDAGENT_EXPORT int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    const int r = exec_list(by_path, path, arg, ap);
    va_end(ap);
    return r;
}

TDAGENT_EXPORT int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    const int r = exec_list(by_search, file, arg, ap);
    va_end(ap);
    return r;
}

TDAGENT_EXPORT int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    const int r = exec_list(with_environment, path, arg, ap);
    va_end(ap);
    return r;
}
