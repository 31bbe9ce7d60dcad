/* A three-state futex mutex (Drepper, "Futexes Are Tricky") for the agent's
 * own bookkeeping: the agent's calls must never go through the pthread
 * functions it interposes. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tdagent_internal.h"

enum { unlocked = 0, locked = 1, contended = 2 };

void tdagent_futex_wait(int *word, int expected)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

void tdagent_futex_wake_all(int *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void tdagent_lock_acquire(struct tdagent_lock *lock)
{
    int c = unlocked;
    if (__atomic_compare_exchange_n(&lock->word, &c, locked, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    if (c != contended)
        c = __atomic_exchange_n(&lock->word, contended, __ATOMIC_ACQUIRE);
    while (c != unlocked) {
        tdagent_futex_wait(&lock->word, contended);
        c = __atomic_exchange_n(&lock->word, contended, __ATOMIC_ACQUIRE);
    }
}

void tdagent_lock_release(struct tdagent_lock *lock)
{
    if (__atomic_exchange_n(&lock->word, unlocked, __ATOMIC_RELEASE) == contended)
        syscall(SYS_futex, &lock->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
