/*
 * trylock_storm [THREADS] [SECONDS] [RATE]
 *
 * An event-heavy program with its own progress counter: main holds one
 * mutex for the whole run while THREADS threads (default 2) call
 * pthread_mutex_trylock on it in a loop for SECONDS seconds (default 3).
 * RATE (default 0: as fast as they can) paces the threads to RATE calls a
 * second in all: each makes its share in bursts, one every millisecond.
 * Every call fails with EBUSY, and under the agent with TD_LOCK_TRY armed
 * each failure is one event (no thread ever sleeps on the mutex: nothing
 * else happens per event). Each thread counts its own failures.
 *
 * Prints, to stdout, line-buffered:
 *
 *   ready PID                          at start
 *   progress T_NS COUNT                every 50 ms: CLOCK_MONOTONIC, the
 *                                      failures of all threads so far
 *   total COUNT seconds S cpu_s C      at the end: every failure, the
 *                                      run's wall time, its CPU (getrusage)
 *
 * so a bench can read the rate at which the program makes progress before,
 * during and after a tracer (bench/locks/run_stream_bench).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { max_threads = 64 };

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_int stop;
static double per_thread_rate; /* calls a second per thread; 0: unpaced */
/* One counter per thread, each on its own cache line. */
static struct {
    _Alignas(64) atomic_ulong failures;
} counts[max_threads];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned long total_failures(int threads)
{
    unsigned long n = 0;
    for (int i = 0; i < threads; ++i)
        n += atomic_load_explicit(&counts[i].failures, memory_order_relaxed);
    return n;
}

static void try_once(atomic_ulong *mine)
{
    if (pthread_mutex_trylock(&mutex) == EBUSY)
        atomic_store_explicit(mine, atomic_load_explicit(mine, memory_order_relaxed) + 1, memory_order_relaxed);
}

static void *trier(void *arg)
{
    atomic_ulong *mine = &counts[(intptr_t)arg].failures;
    if (per_thread_rate <= 0) {
        while (!atomic_load_explicit(&stop, memory_order_relaxed))
            try_once(mine);
        return NULL;
    }
    /* Paced: by the end of each millisecond, as many calls as the rate
     * allows since the start. */
    const uint64_t start = now_ns();
    unsigned long done = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        const unsigned long due = (unsigned long)((double)(now_ns() - start) / 1e9 * per_thread_rate);
        for (; done < due; ++done)
            try_once(mine);
        struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    double rate = argc > 3 ? atof(argv[3]) : 0.0;
    if (threads < 1 || threads > max_threads || seconds <= 0 || rate < 0) {
        fprintf(stderr, "usage: trylock_storm [THREADS 1-%d] [SECONDS] [RATE]\n", max_threads);
        return 2;
    }
    per_thread_rate = rate / threads;
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_mutex_lock(&mutex);
    printf("ready %d\n", (int)getpid());
    pthread_t t[max_threads];
    const uint64_t start = now_ns();
    for (intptr_t i = 0; i < threads; ++i)
        if (pthread_create(&t[i], NULL, trier, (void *)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    const uint64_t end = start + (uint64_t)(seconds * 1e9);
    for (uint64_t now = now_ns(); now < end; now = now_ns()) {
        struct timespec step = {0, 50 * 1000 * 1000};
        nanosleep(&step, NULL);
        printf("progress %llu %lu\n", (unsigned long long)now_ns(), total_failures(threads));
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; ++i)
        pthread_join(t[i], NULL);
    pthread_mutex_unlock(&mutex);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                       ru.ru_stime.tv_usec / 1e6;
    printf("total %lu seconds %.6f cpu_s %.6f\n", total_failures(threads), (double)(now_ns() - start) / 1e9, cpu);
    return 0;
}
