/*
 * stats_nolib_target [--record F] [--wait-start] N
 *
 * The target of the "no thread library" statistics tests (issue 3: stats,
 * rusage and lwpinfo work on any target, nthreads then coming from /proc).
 * Built only as targets a thread-library backend cannot read
 * (tests/stats/CMakeLists.txt): linked statically and stripped of every
 * symbol table (stats_nolib_static_stripped), and with musl
 * (stats_nolib_musl). Starts N threads that stay alive (each blocks in
 * pause()); main records "done" once all N have recorded themselves, then
 * blocks too. Killed by the test.
 *
 * Records: "start <pid>"; "thread <tid> <pthread_t> parked" per thread,
 * written by the thread itself; "done".
 *
 * Builds with glibc and musl: only fixture_common.h's plain POSIX calls.
 */
#include "../fixtures/fixture_common.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cond = PTHREAD_COND_INITIALIZER;
static long started;

static void *parked_main(void *arg)
{
    (void)arg;
    fx_record_self("parked");
    pthread_mutex_lock(&lock);
    started++;
    pthread_cond_signal(&started_cond);
    pthread_mutex_unlock(&lock);
    fx_block_forever();
    return NULL;
}

int main(int argc, char **argv)
{
    long n, i;
    pthread_t t;
    int first = fx_parse_common(argc, argv, 1, NULL);

    if (argc - first != 1) {
        fprintf(stderr, "usage: stats_nolib_target [--record F] [--wait-start] N\n");
        return FX_EXIT_USAGE;
    }
    n = fx_parse_count(argv[first], "N");
    for (i = 0; i < n; i++)
        fx_create(&t, NULL, parked_main, NULL);

    pthread_mutex_lock(&lock);
    while (started < n)
        pthread_cond_wait(&started_cond, &lock);
    pthread_mutex_unlock(&lock);
    fx_record("done");

    fx_block_forever();
    return 0;
}
