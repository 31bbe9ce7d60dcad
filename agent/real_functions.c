/* The functions the wrappers forward to. Every pointer starts at a stub that
 * resolves them all and then forwards, so a wrapper called before the
 * agent's constructor (another library's constructor, say) works and the
 * fast path has no "resolved yet?" branch.
 *
 * dlsym(RTLD_NEXT) finds the next definition after the agent — libc's, or
 * another interposer's. pthread_cond_wait and pthread_cond_timedwait exist in
 * two versions (GLIBC_2.2.5, the old condvar, and GLIBC_2.3.2, the default);
 * dlvsym asks for the default one, which libstdc++ and every program built
 * since 2003 call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tdagent_internal.h"

static void *lookup(const char *name, const char *version)
{
    void *p = version != NULL ? dlvsym(RTLD_NEXT, name, version) : NULL;
    if (p == NULL)
        p = dlsym(RTLD_NEXT, name);
    if (p == NULL) {
        /* The agent was loaded after libc (dlopen, or linked after it):
         * there is no "next"; take libc's own definition. */
        void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        if (libc != NULL) {
            p = version != NULL ? dlvsym(libc, name, version) : NULL;
            if (p == NULL)
                p = dlsym(libc, name);
            dlclose(libc);
        }
    }
    return p;
}

/* Fallbacks for functions this libc lacks (the clock* variants before 2.30). */
static int missing_join_clock(pthread_t t, void **r, clockid_t c, const struct timespec *ts)
{
    (void)t, (void)r, (void)c, (void)ts;
    return ENOSYS;
}
static int missing_mutex_clock(pthread_mutex_t *m, clockid_t c, const struct timespec *ts)
{
    (void)m, (void)c, (void)ts;
    return ENOSYS;
}
static int missing_rwlock_clock(pthread_rwlock_t *l, clockid_t c, const struct timespec *ts)
{
    (void)l, (void)c, (void)ts;
    return ENOSYS;
}
static int missing_cond_clock(pthread_cond_t *cv, pthread_mutex_t *m, clockid_t c, const struct timespec *ts)
{
    (void)cv, (void)m, (void)c, (void)ts;
    return ENOSYS;
}
static int missing_sem_clock(sem_t *s, clockid_t c, const struct timespec *ts)
{
    (void)s, (void)c, (void)ts;
    errno = ENOSYS;
    return -1;
}

/* Stubs: resolve everything, then forward through the now-real pointer. */
#define STUB(ret, name, params, args)          \
    static ret stub_##name params              \
    {                                          \
        tdagent_resolve_real();                \
        return tdagent_real.name args;         \
    }

STUB(int, pthread_create, (pthread_t * a, const pthread_attr_t *b, void *(*c)(void *), void *d), (a, b, c, d))
STUB(int, pthread_join, (pthread_t a, void **b), (a, b))
STUB(int, pthread_tryjoin_np, (pthread_t a, void **b), (a, b))
STUB(int, pthread_timedjoin_np, (pthread_t a, void **b, const struct timespec *c), (a, b, c))
STUB(int, pthread_clockjoin_np, (pthread_t a, void **b, clockid_t c, const struct timespec *d), (a, b, c, d))
STUB(int, pthread_detach, (pthread_t a), (a))
STUB(int, pthread_mutex_lock, (pthread_mutex_t * a), (a))
STUB(int, pthread_mutex_trylock, (pthread_mutex_t * a), (a))
STUB(int, pthread_mutex_timedlock, (pthread_mutex_t * a, const struct timespec *b), (a, b))
STUB(int, pthread_mutex_clocklock, (pthread_mutex_t * a, clockid_t b, const struct timespec *c), (a, b, c))
STUB(int, pthread_rwlock_rdlock, (pthread_rwlock_t * a), (a))
STUB(int, pthread_rwlock_wrlock, (pthread_rwlock_t * a), (a))
STUB(int, pthread_rwlock_tryrdlock, (pthread_rwlock_t * a), (a))
STUB(int, pthread_rwlock_trywrlock, (pthread_rwlock_t * a), (a))
STUB(int, pthread_rwlock_timedrdlock, (pthread_rwlock_t * a, const struct timespec *b), (a, b))
STUB(int, pthread_rwlock_timedwrlock, (pthread_rwlock_t * a, const struct timespec *b), (a, b))
STUB(int, pthread_rwlock_clockrdlock, (pthread_rwlock_t * a, clockid_t b, const struct timespec *c), (a, b, c))
STUB(int, pthread_rwlock_clockwrlock, (pthread_rwlock_t * a, clockid_t b, const struct timespec *c), (a, b, c))
STUB(int, pthread_spin_lock, (pthread_spinlock_t * a), (a))
STUB(int, pthread_spin_trylock, (pthread_spinlock_t * a), (a))
STUB(int, pthread_cond_wait, (pthread_cond_t * a, pthread_mutex_t *b), (a, b))
STUB(int, pthread_cond_timedwait, (pthread_cond_t * a, pthread_mutex_t *b, const struct timespec *c), (a, b, c))
STUB(int, pthread_cond_clockwait, (pthread_cond_t * a, pthread_mutex_t *b, clockid_t c, const struct timespec *d),
     (a, b, c, d))
STUB(int, sem_init, (sem_t * a, int b, unsigned c), (a, b, c))
STUB(int, sem_destroy, (sem_t * a), (a))
STUB(int, sem_post, (sem_t * a), (a))
STUB(int, sem_getvalue, (sem_t * a, int *b), (a, b))
STUB(int, sem_wait, (sem_t * a), (a))
STUB(int, sem_trywait, (sem_t * a), (a))
STUB(int, sem_timedwait, (sem_t * a, const struct timespec *b), (a, b))
STUB(int, sem_clockwait, (sem_t * a, clockid_t b, const struct timespec *c), (a, b, c))
STUB(int, pthread_barrier_wait, (pthread_barrier_t * a), (a))
STUB(int, pthread_setconcurrency, (int a), (a))
STUB(int, pthread_getconcurrency, (void), ())
STUB(int, sigaction, (int a, const struct sigaction *b, struct sigaction *c), (a, b, c))
STUB(int, execve, (const char *a, char *const b[], char *const c[]), (a, b, c))
STUB(int, execvpe, (const char *a, char *const b[], char *const c[]), (a, b, c))
STUB(int, execv, (const char *a, char *const b[]), (a, b))
STUB(int, execvp, (const char *a, char *const b[]), (a, b))
STUB(int, fexecve, (int a, char *const b[], char *const c[]), (a, b, c))

__attribute__((noreturn)) static void stub_pthread_exit(void *value)
{
    tdagent_resolve_real();
    tdagent_real.pthread_exit(value);
}

struct tdagent_real tdagent_real = {
    .pthread_create = stub_pthread_create,
    .pthread_exit = stub_pthread_exit,
    .pthread_join = stub_pthread_join,
    .pthread_tryjoin_np = stub_pthread_tryjoin_np,
    .pthread_timedjoin_np = stub_pthread_timedjoin_np,
    .pthread_clockjoin_np = stub_pthread_clockjoin_np,
    .pthread_detach = stub_pthread_detach,
    .pthread_mutex_lock = stub_pthread_mutex_lock,
    .pthread_mutex_trylock = stub_pthread_mutex_trylock,
    .pthread_mutex_timedlock = stub_pthread_mutex_timedlock,
    .pthread_mutex_clocklock = stub_pthread_mutex_clocklock,
    .pthread_rwlock_rdlock = stub_pthread_rwlock_rdlock,
    .pthread_rwlock_wrlock = stub_pthread_rwlock_wrlock,
    .pthread_rwlock_tryrdlock = stub_pthread_rwlock_tryrdlock,
    .pthread_rwlock_trywrlock = stub_pthread_rwlock_trywrlock,
    .pthread_rwlock_timedrdlock = stub_pthread_rwlock_timedrdlock,
    .pthread_rwlock_timedwrlock = stub_pthread_rwlock_timedwrlock,
    .pthread_rwlock_clockrdlock = stub_pthread_rwlock_clockrdlock,
    .pthread_rwlock_clockwrlock = stub_pthread_rwlock_clockwrlock,
    .pthread_spin_lock = stub_pthread_spin_lock,
    .pthread_spin_trylock = stub_pthread_spin_trylock,
    .pthread_cond_wait = stub_pthread_cond_wait,
    .pthread_cond_timedwait = stub_pthread_cond_timedwait,
    .pthread_cond_clockwait = stub_pthread_cond_clockwait,
    .sem_init = stub_sem_init,
    .sem_destroy = stub_sem_destroy,
    .sem_post = stub_sem_post,
    .sem_getvalue = stub_sem_getvalue,
    .sem_wait = stub_sem_wait,
    .sem_trywait = stub_sem_trywait,
    .sem_timedwait = stub_sem_timedwait,
    .sem_clockwait = stub_sem_clockwait,
    .pthread_barrier_wait = stub_pthread_barrier_wait,
    .pthread_setconcurrency = stub_pthread_setconcurrency,
    .pthread_getconcurrency = stub_pthread_getconcurrency,
    .sigaction = stub_sigaction,
    .execve = stub_execve,
    .execvpe = stub_execvpe,
    .execv = stub_execv,
    .execvp = stub_execvp,
    .fexecve = stub_fexecve,
};

/* Every glibc the agent supports has these; without one, forwarding is
 * impossible, so say which and stop (the stub would recurse forever). */
__attribute__((noreturn)) static void missing_required(const char *name)
{
    static const char prefix[] = "libtdagent: cannot find the real ";
    (void)!write(2, prefix, sizeof prefix - 1);
    (void)!write(2, name, strlen(name));
    (void)!write(2, "\n", 1);
    abort();
}

/* Stores a resolved pointer; a function this libc lacks gets its fallback,
 * or stops the program when it has none. */
#define RESOLVE(field, version, fallback)                                                  \
    do {                                                                                   \
        void *p_ = lookup(#field, version);                                                \
        __typeof__(tdagent_real.field) f_ = p_ != NULL ? (__typeof__(f_))p_ : (fallback); \
        if (f_ == NULL)                                                                    \
            missing_required(#field);                                                      \
        __atomic_store_n(&tdagent_real.field, f_, __ATOMIC_RELEASE);                       \
    } while (0)

void tdagent_resolve_real(void)
{
    RESOLVE(pthread_create, NULL, NULL);
    RESOLVE(pthread_exit, NULL, NULL);
    RESOLVE(pthread_join, NULL, NULL);
    RESOLVE(pthread_tryjoin_np, NULL, NULL);
    RESOLVE(pthread_timedjoin_np, NULL, NULL);
    RESOLVE(pthread_clockjoin_np, NULL, missing_join_clock);
    RESOLVE(pthread_detach, NULL, NULL);
    RESOLVE(pthread_mutex_lock, NULL, NULL);
    RESOLVE(pthread_mutex_trylock, NULL, NULL);
    RESOLVE(pthread_mutex_timedlock, NULL, NULL);
    RESOLVE(pthread_mutex_clocklock, NULL, missing_mutex_clock);
    RESOLVE(pthread_rwlock_rdlock, NULL, NULL);
    RESOLVE(pthread_rwlock_wrlock, NULL, NULL);
    RESOLVE(pthread_rwlock_tryrdlock, NULL, NULL);
    RESOLVE(pthread_rwlock_trywrlock, NULL, NULL);
    RESOLVE(pthread_rwlock_timedrdlock, NULL, NULL);
    RESOLVE(pthread_rwlock_timedwrlock, NULL, NULL);
    RESOLVE(pthread_rwlock_clockrdlock, NULL, missing_rwlock_clock);
    RESOLVE(pthread_rwlock_clockwrlock, NULL, missing_rwlock_clock);
    RESOLVE(pthread_spin_lock, NULL, NULL);
    RESOLVE(pthread_spin_trylock, NULL, NULL);
    RESOLVE(pthread_cond_wait, "GLIBC_2.3.2", NULL);
    RESOLVE(pthread_cond_timedwait, "GLIBC_2.3.2", NULL);
    RESOLVE(pthread_cond_clockwait, NULL, missing_cond_clock);
    RESOLVE(sem_init, NULL, NULL);
    RESOLVE(sem_destroy, NULL, NULL);
    RESOLVE(sem_post, NULL, NULL);
    RESOLVE(sem_getvalue, NULL, NULL);
    RESOLVE(sem_wait, NULL, NULL);
    RESOLVE(sem_trywait, NULL, NULL);
    RESOLVE(sem_timedwait, NULL, NULL);
    RESOLVE(sem_clockwait, NULL, missing_sem_clock);
    RESOLVE(pthread_barrier_wait, NULL, NULL);
    RESOLVE(pthread_setconcurrency, NULL, NULL);
    RESOLVE(pthread_getconcurrency, NULL, NULL);
    RESOLVE(sigaction, NULL, NULL);
    RESOLVE(execve, NULL, NULL);
    RESOLVE(execvpe, NULL, NULL);
    RESOLVE(execv, NULL, NULL);
    RESOLVE(execvp, NULL, NULL);
    RESOLVE(fexecve, NULL, NULL);
}
