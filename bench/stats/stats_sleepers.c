/*
 * stats_sleepers N
 *
 * The target of the statistics benchmark: N threads (64 KiB stacks) that
 * block forever, plus main. Prints "ready <pid>" (flushed) once all N run,
 * then blocks; ends on SIGTERM/SIGKILL or end of file on stdin.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static long started;

static void *sleeper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    started++;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_attr_t attr;
    long n;
    char c;

    if (argc != 2 || (n = strtol(argv[1], NULL, 10)) < 0) {
        fprintf(stderr, "usage: stats_sleepers N\n");
        return 2;
    }
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (long i = 0; i < n; i++) {
        pthread_t t;
        int rc = pthread_create(&t, &attr, sleeper, NULL);
        if (rc != 0) {
            fprintf(stderr, "stats_sleepers: pthread_create #%ld: %s\n", i, strerror(rc));
            return 3;
        }
    }
    pthread_mutex_lock(&lock);
    while (started < n)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    while (read(0, &c, 1) < 0 && errno == EINTR) {
    }
    return 0;
}
