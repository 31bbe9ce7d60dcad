/* TD_CATCHSIG: handlers installed with sigaction or signal are wrapped. The
 * kernel gets catch_trampoline (always SA_SIGINFO); the user's handler and
 * flags are kept per signal, and sigaction/signal hand them back as the
 * "old" action, so a program that saves and restores handlers (or compares
 * them, like the JVM) sees its own.
 *
 * The trampoline runs in signal context: it reads the thread's record from
 * initial-exec TLS and reports with tdagent_report, which only uses atomics
 * and raw syscalls — no locks, no allocation. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tdagent_internal.h"

enum { max_signal = 65 }; /* signals 1..64 */

/* The user's action for one signal, double-buffered: sigaction writes the
 * slot not in use, then flips `current`, so a handler running on another
 * thread never reads a handler with the other install's flags. */
struct user_action {
    void *handler; /* sa_handler or sa_sigaction */
    int flags;     /* the user's sa_flags (SA_SIGINFO tells the signature) */
};
static struct {
    struct user_action slot[2];
    unsigned char current;
} user_actions[max_signal];

/* ---- signal blocking for tdagent_report ------------------------------- */

uint64_t tdagent_reporting_mask(void)
{
    uint64_t mask = ~(uint64_t)0;
    static const int synchronous[] = {SIGTRAP, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS};
    for (unsigned i = 0; i < sizeof synchronous / sizeof synchronous[0]; ++i)
        mask &= ~((uint64_t)1 << (synchronous[i] - 1));
    return mask;
}

void tdagent_signals_block(sigset_t *old)
{
    /* The kernel's sigset is 64 bits; glibc's sigset_t is larger and the
     * raw syscall reads only the first 8 bytes. SIG_SETMASK rather than
     * SIG_BLOCK: the synchronous signals are *unblocked* while reporting,
     * even in a thread that blocks everything (node's inspector thread), so
     * the int3 a controller plants raises a SIGTRAP the kernel can deliver
     * normally — a blocked one it force-unblocks after resetting the
     * process's SIGTRAP handler to SIG_DFL. */
    uint64_t mask = tdagent_reporting_mask();
    memset(old, 0, sizeof *old);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &mask, old, sizeof mask);
}

void tdagent_signals_block_for_good(void)
{
    uint64_t mask = tdagent_reporting_mask();
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &mask, NULL, sizeof mask);
}

void tdagent_signals_restore_mask(uint64_t mask)
{
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, sizeof mask);
}

void tdagent_signals_restore(const sigset_t *old)
{
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, old, NULL, sizeof(uint64_t));
}

/* ---- the trampoline ---------------------------------------------------- */

static void catch_trampoline(int sig, siginfo_t *info, void *context)
{
    int saved_errno = errno;
    struct tdagent_thread *self = tdagent_self;
    if (self != &tdagent_unregistered)
        __atomic_add_fetch(&self->nsignals, 1, __ATOMIC_RELAXED);
    if (TDAGENT_UNLIKELY(tdagent_reporting(self)))
        tdagent_report(self, self, TD_CATCHSIG, (void *)(intptr_t)sig);

    struct user_action action = {NULL, 0};
    if (sig > 0 && sig < max_signal) {
        unsigned char c = __atomic_load_n(&user_actions[sig].current, __ATOMIC_ACQUIRE);
        action.handler = __atomic_load_n(&user_actions[sig].slot[c].handler, __ATOMIC_RELAXED);
        action.flags = __atomic_load_n(&user_actions[sig].slot[c].flags, __ATOMIC_RELAXED);
    }
    errno = saved_errno;
    /* The user changed the disposition to SIG_DFL/SIG_IGN while this signal
     * was on its way: nothing left to run. */
    if (action.handler == (void *)SIG_DFL || action.handler == (void *)SIG_IGN)
        return;
    if (action.flags & SA_SIGINFO)
        ((void (*)(int, siginfo_t *, void *))action.handler)(sig, info, context);
    else
        ((void (*)(int))action.handler)(sig);
}

static int is_function(void *handler)
{
    return handler != (void *)SIG_DFL && handler != (void *)SIG_IGN && handler != (void *)SIG_ERR;
}

static struct user_action current_user_action(int sig)
{
    unsigned char c = __atomic_load_n(&user_actions[sig].current, __ATOMIC_ACQUIRE);
    return user_actions[sig].slot[c];
}

static void store_user_action(int sig, void *handler, int flags)
{
    unsigned char next = __atomic_load_n(&user_actions[sig].current, __ATOMIC_RELAXED) ^ 1;
    __atomic_store_n(&user_actions[sig].slot[next].handler, handler, __ATOMIC_RELAXED);
    __atomic_store_n(&user_actions[sig].slot[next].flags, flags, __ATOMIC_RELAXED);
    __atomic_store_n(&user_actions[sig].current, next, __ATOMIC_RELEASE);
}

TDAGENT_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *oldact)
{
    if (sig <= 0 || sig >= max_signal)
        return tdagent_real.sigaction(sig, act, oldact);

    struct user_action previous = current_user_action(sig);
    struct sigaction kernel_old;
    int err;
    if (act != NULL && act->sa_sigaction == catch_trampoline) {
        /* Our own trampoline handed back (read with the raw syscall and
         * reinstalled): keep the user's handler behind it. */
        err = tdagent_real.sigaction(sig, act, &kernel_old);
    } else if (act != NULL && is_function((void *)act->sa_handler)) {
        struct sigaction wrapped = *act;
        wrapped.sa_sigaction = catch_trampoline;
        wrapped.sa_flags |= SA_SIGINFO;
        store_user_action(sig, (void *)act->sa_handler, act->sa_flags);
        err = tdagent_real.sigaction(sig, &wrapped, &kernel_old);
        if (err != 0)
            store_user_action(sig, previous.handler, previous.flags);
    } else {
        err = tdagent_real.sigaction(sig, act, &kernel_old);
        if (err == 0 && act != NULL)
            store_user_action(sig, (void *)act->sa_handler, act->sa_flags);
    }
    if (err == 0 && oldact != NULL) {
        *oldact = kernel_old;
        if (kernel_old.sa_sigaction == catch_trampoline) {
            oldact->sa_handler = (void (*)(int))previous.handler;
            oldact->sa_flags = (kernel_old.sa_flags & ~SA_SIGINFO) | (previous.flags & SA_SIGINFO);
        }
    }
    return err;
}

/* glibc's signal() and friends call its internal sigaction, so they are
 * wrapped too, with glibc's semantics (BSD for signal/bsd_signal: the signal
 * is blocked in its handler and system calls restart; System V for
 * sysv_signal: one-shot, not blocked). */
static sighandler_t install(int sig, sighandler_t handler, int flags, int block_self)
{
    if (sig <= 0 || sig >= max_signal) {
        errno = EINVAL;
        return SIG_ERR;
    }
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    if (block_self)
        sigaddset(&act.sa_mask, sig);
    act.sa_flags = flags;
    if (sigaction(sig, &act, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

TDAGENT_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    return install(sig, handler, SA_RESTART, 1);
}

TDAGENT_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler)
{
    return install(sig, handler, SA_RESTART, 1);
}

TDAGENT_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler)
{
    return install(sig, handler, SA_RESETHAND | SA_NODEFER, 0);
}
