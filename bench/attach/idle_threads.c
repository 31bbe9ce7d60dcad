/* idle_threads T GAPFILE: the target of bench/attach/run_attach_bench.
 * Starts T threads that block in pause(), and one heartbeat thread that
 * sleeps 1 ms at a time and keeps, in GAPFILE (8 bytes, mapped shared), the
 * longest gap in ns it has seen between two wake-ups. A tracer that holds
 * the process still shows up as a long gap; the bench writes 0 into the file
 * before a session and reads it after. Prints "ready <pid>" once every
 * thread is up, then waits until killed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t *max_gap_ns;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static long started;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *idle_main(void *arg)
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

static void *heartbeat_main(void *arg)
{
    (void)arg;
    const struct timespec ms = {0, 1000000};
    uint64_t last = now_ns();
    for (;;) {
        nanosleep(&ms, NULL);
        uint64_t now = now_ns();
        if (now - last > *max_gap_ns)
            *max_gap_ns = now - last;
        last = now;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: idle_threads T GAPFILE\n");
        return 2;
    }
    long n = atol(argv[1]);
    int fd = open(argv[2], O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, 8) != 0) {
        perror(argv[2]);
        return 1;
    }
    max_gap_ns = mmap(NULL, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (max_gap_ns == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (long i = 0; i < n; ++i) {
        pthread_t t;
        if (pthread_create(&t, &attr, idle_main, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    pthread_mutex_lock(&lock);
    while (started < n)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    pthread_t hb;
    pthread_create(&hb, &attr, heartbeat_main, NULL);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (;;)
        pause();
}
