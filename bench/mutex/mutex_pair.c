/*
 * mutex_pair [PAIRS [BATCHES [lock|trylock]]]
 *
 * Times an uncontended pthread_mutex_lock/pthread_mutex_unlock pair (or,
 * with "trylock", a pthread_mutex_trylock/pthread_mutex_unlock pair: the try
 * always succeeds) on one thread: BATCHES batches (default 7) of PAIRS pairs
 * (default 20000000), CLOCK_MONOTONIC around each batch. Prints one line:
 *
 *   ns_per_pair <median of the batches> min <fastest batch> agent <yes|no> lock_from <module>
 *
 * "agent" says whether libtdagent.so is loaded (its __tdagent_version is
 * visible), "lock_from" which module the timed lock call resolves to (the
 * agent when preloaded, libc otherwise): the calls below go through the PLT
 * exactly as a program's would. Reporting is off: nothing enables it
 * without a controller.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* noinline: one call site for both functions, the same code either way. */
__attribute__((noinline)) static void run_pairs(pthread_mutex_t *m, long pairs)
{
    for (long i = 0; i < pairs; ++i) {
        pthread_mutex_lock(m);
        pthread_mutex_unlock(m);
    }
}

/* The same with the try call; a failed try (never here) would abort. */
__attribute__((noinline)) static void run_try_pairs(pthread_mutex_t *m, long pairs)
{
    for (long i = 0; i < pairs; ++i) {
        if (pthread_mutex_trylock(m) != 0)
            abort();
        pthread_mutex_unlock(m);
    }
}

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 20000000L;
    int batches = argc > 2 ? atoi(argv[2]) : 7;
    const char *call = argc > 3 ? argv[3] : "lock";
    int is_try = strcmp(call, "trylock") == 0;
    if (pairs <= 0 || batches <= 0 || batches > 1000 || (!is_try && strcmp(call, "lock") != 0)) {
        fprintf(stderr, "usage: mutex_pair [PAIRS [BATCHES (1..1000) [lock|trylock]]]\n");
        return 2;
    }
    void (*run)(pthread_mutex_t *, long) = is_try ? run_try_pairs : run_pairs;

    run(&mutex, pairs / 10 + 1); /* warm-up: PLT bound, caches hot */
    double per_pair[1000];
    for (int b = 0; b < batches; ++b) {
        double start = now_ns();
        run(&mutex, pairs);
        per_pair[b] = (now_ns() - start) / (double)pairs;
    }
    qsort(per_pair, (size_t)batches, sizeof per_pair[0], compare_double);

    const char *agent = dlsym(RTLD_DEFAULT, "__tdagent_version") != NULL ? "yes" : "no";
    Dl_info info;
    const char *from = "?";
    void *lock = dlsym(RTLD_DEFAULT, is_try ? "pthread_mutex_trylock" : "pthread_mutex_lock");
    if (lock != NULL && dladdr(lock, &info) != 0 && info.dli_fname != NULL) {
        from = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
    }
    printf("ns_per_pair %.3f min %.3f agent %s lock_from %s\n", per_pair[batches / 2], per_pair[0], agent, from);
    return 0;
}
