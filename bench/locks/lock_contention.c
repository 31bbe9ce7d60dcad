/*
 * lock_contention [ROUNDS]
 *
 * Times forced contended acquisitions of one mutex: in each round (default
 * 2000) one thread holds the mutex, the other calls pthread_mutex_lock on
 * it, and the holder lets go as soon as the other sleeps in futex(2) on the
 * mutex (read from /proc/self/task/TID/syscall); then the roles swap. So
 * every round is exactly one contended acquisition, with no hold time of
 * its own. Prints one line:
 *
 *   contentions N seconds S us_per_contention U cpu_s C
 *
 * C is the process's own CPU time (user + system, all its threads,
 * getrusage(RUSAGE_SELF)), so that a bench can tell a tracer's CPU from
 * the target's.
 *
 * Under `tdctl --agent -e locks` each round adds the agent's three reports
 * (TD_LOCK_TRY, TD_SLEEP, TD_READY) and tdctl's work at each; the
 * difference from a run without tdctl is the cost of one contention event.
 * The hand-shake calls nothing the agent interposes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static int tids[2];
static int turn;      /* round whose holder has the mutex */
static long rounds;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Whether thread tid sits in futex(2) on the mutex. */
static int blocked_on_mutex(int tid)
{
    char path[64], text[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    long nr = -1;
    unsigned long uaddr = 0;
    return sscanf(text, "%ld 0x%lx", &nr, &uaddr) == 2 && nr == SYS_futex &&
           uaddr >= (uintptr_t)&mutex && uaddr < (uintptr_t)&mutex + sizeof mutex;
}

static void pause_briefly(void)
{
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

static void *worker(void *arg)
{
    int self = (int)(intptr_t)arg;
    __atomic_store_n(&tids[self], (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    while (__atomic_load_n(&tids[1 - self], __ATOMIC_ACQUIRE) == 0)
        pause_briefly();
    int other = tids[1 - self];
    for (long r = 0; r < rounds; ++r) {
        if (r % 2 == self) {
            pthread_mutex_lock(&mutex);
            __atomic_store_n(&turn, (int)r + 1, __ATOMIC_RELEASE);
            while (!blocked_on_mutex(other))
                pause_briefly();
            pthread_mutex_unlock(&mutex);
        } else {
            while (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) != (int)r + 1)
                pause_briefly();
            pthread_mutex_lock(&mutex);
            pthread_mutex_unlock(&mutex);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 2000;
    if (rounds <= 0) {
        fprintf(stderr, "usage: lock_contention [ROUNDS]\n");
        return 2;
    }
    pthread_t t[2];
    double start = now_s();
    for (int i = 0; i < 2; ++i)
        if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0)
            return 1;
    for (int i = 0; i < 2; ++i)
        pthread_join(t[i], NULL);
    double seconds = now_s() - start;
    struct rusage self;
    getrusage(RUSAGE_SELF, &self);
    double cpu = (double)self.ru_utime.tv_sec + (double)self.ru_stime.tv_sec +
                 ((double)self.ru_utime.tv_usec + (double)self.ru_stime.tv_usec) * 1e-6;
    printf("contentions %ld seconds %.6f us_per_contention %.3f cpu_s %.6f\n", rounds, seconds,
           seconds * 1e6 / (double)rounds, cpu);
    return 0;
}
