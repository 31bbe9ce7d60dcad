/* A process that ends while its threads keep creating threads, for the
 * controller's handling of clones whose parent dies before reporting them.
 *   group_exit_target exit SECONDS   four threads create detached threads in a
 *                                    loop; main calls exit(7) after SECONDS
 *   group_exit_target exec SECONDS   the same, but a fifth thread execs
 *                                    `/bin/sh -c 'exit 5'` after SECONDS
 *   group_exit_target thread-exit SECONDS four threads spin; one of them calls
 *                                    exit(7) after SECONDS, while main waits
 *                                    in pause(): the leader is killed by the
 *                                    group exit of a thread
 *   group_exit_target all-exit SECONDS eight threads wait at a barrier; after
 *                                    SECONDS main joins them and all nine
 *                                    call _exit(7) at once
 *   group_exit_target create-exec SECONDS a thread creates detached threads
 *                                    one at a time and execs `/bin/sh -c
 *                                    'exit 5'` as soon as a spinning thread
 *                                    stood still for 5 ms after a creation
 *                                    (the creator was run alone), or after
 *                                    SECONDS
 *   group_exit_target leader-exit SECONDS two threads sleep, one of them
 *                                    calls exit(7) after SECONDS; main calls
 *                                    pthread_exit() at once
 *   group_exit_target leader-waits SECONDS the same, main waiting in pause()
 *   group_exit_target held-exit SECONDS one thread spins reading the clock
 *                                    and calls _exit(7) once it finds more
 *                                    than 5 ms gone between two readings (it
 *                                    was held) or SECONDS passed; 100 more
 *                                    threads wait in pause(), as does main:
 *                                    let go after a hold, the spinner's exit
 *                                    meets the threads not let go yet
 * Prints "ready" once the spawners run. In thread-exit and all-exit modes it
 * prints "exit NS" (CLOCK_MONOTONIC, ns) just before the exit, so a test can
 * time what comes after. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds = 1.0;

static void say_exit_time(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    printf("exit %lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
    fflush(stdout);
}

static void *leaf(void *arg)
{
    (void)arg;
    return NULL;
}

static void *spawner(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_t t;
        if (pthread_create(&t, NULL, leaf, NULL) == 0)
            pthread_detach(t);
    }
    return NULL;
}

static volatile int spin_sink;

static void *spin(void *arg)
{
    for (;;)
        spin_sink = spin_sink + 1;
    return arg;
}

static void *exiter(void *arg)
{
    (void)arg;
    usleep((useconds_t)(seconds * 1e6));
    say_exit_time();
    exit(7);
}

static long long now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static void *exit_when_held(void *arg)
{
    (void)arg;
    const long long end = now_ns() + (long long)(seconds * 1e9);
    for (long long last = now_ns();;) {
        long long now = now_ns();
        if (now - last > 5000000 || now > end)
            _exit(7);
        last = now;
    }
}

static void *wait_for_ever(void *arg)
{
    for (;;)
        pause();
    return arg;
}

static void *create_then_exec(void *arg)
{
    (void)arg;
    const long long end = now_ns() + (long long)(seconds * 1e9);
    pthread_attr_t detached;
    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    for (;;) {
        pthread_t t;
        pthread_create(&t, &detached, leaf, NULL);
        /* Run alone (the spinner, its heartbeat, held) for 5 ms, or out of
         * time: exec. */
        const int before = spin_sink;
        const long long start = now_ns();
        while (spin_sink == before && now_ns() - start < 5000000)
            ;
        if (spin_sink == before || now_ns() > end) {
            char *argv[] = {"/bin/sh", "-c", "exit 5", NULL};
            execv("/bin/sh", argv);
            _exit(99);
        }
    }
}

static void *sleep_then_exit(void *arg)
{
    usleep((useconds_t)(seconds * 1e6));
    if (arg != NULL)
        exit(7);
    return NULL;
}

static pthread_barrier_t all_exit;

static void *exit_together(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&all_exit);
    _exit(7);
}

static void *execer(void *arg)
{
    (void)arg;
    usleep((useconds_t)(seconds * 1e6));
    char *argv[] = {"/bin/sh", "-c", "exit 5", NULL};
    execv("/bin/sh", argv);
    _exit(99);
}

int main(int argc, char **argv)
{
    if (argc != 3 ||
        (strcmp(argv[1], "exit") != 0 && strcmp(argv[1], "exec") != 0 && strcmp(argv[1], "thread-exit") != 0 &&
         strcmp(argv[1], "all-exit") != 0 && strcmp(argv[1], "held-exit") != 0 && strcmp(argv[1], "create-exec") != 0 &&
         strcmp(argv[1], "leader-exit") != 0 && strcmp(argv[1], "leader-waits") != 0)) {
        fprintf(stderr, "usage: group_exit_target exit|exec|thread-exit|all-exit|held-exit|create-exec|leader-exit|"
                        "leader-waits SECONDS\n");
        return 2;
    }
    seconds = atof(argv[2]);
    pthread_t t;
    if (strcmp(argv[1], "leader-exit") == 0 || strcmp(argv[1], "leader-waits") == 0) {
        pthread_create(&t, NULL, sleep_then_exit, NULL);
        pthread_create(&t, NULL, sleep_then_exit, (void *)1);  /* the one that exits */
        printf("ready\n");
        fflush(stdout);
        if (strcmp(argv[1], "leader-exit") == 0)
            pthread_exit(NULL);
        wait_for_ever(NULL);
    }
    if (strcmp(argv[1], "create-exec") == 0) {
        pthread_create(&t, NULL, spin, NULL);
        pthread_create(&t, NULL, create_then_exec, NULL);
        printf("ready\n");
        fflush(stdout);
        wait_for_ever(NULL);
    }
    if (strcmp(argv[1], "held-exit") == 0) {
        pthread_create(&t, NULL, exit_when_held, NULL);
        for (int i = 0; i < 100; ++i)
            pthread_create(&t, NULL, wait_for_ever, NULL);
        printf("ready\n");
        fflush(stdout);
        wait_for_ever(NULL);
    }
    if (strcmp(argv[1], "all-exit") == 0) {
        pthread_barrier_init(&all_exit, NULL, 9);
        for (int i = 0; i < 8; ++i)
            pthread_create(&t, NULL, exit_together, NULL);
        printf("ready\n");
        fflush(stdout);
        usleep((useconds_t)(seconds * 1e6));
        say_exit_time();
        exit_together(NULL);
    }
    if (strcmp(argv[1], "thread-exit") == 0) {
        for (int i = 0; i < 3; ++i)
            pthread_create(&t, NULL, spin, NULL);
        pthread_create(&t, NULL, exiter, NULL);
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    for (int i = 0; i < 4; ++i)
        pthread_create(&t, NULL, spawner, NULL);
    printf("ready\n");
    fflush(stdout);
    if (strcmp(argv[1], "exec") == 0) {
        pthread_create(&t, NULL, execer, NULL);
        for (;;)
            pause();
    }
    usleep((useconds_t)(seconds * 1e6));
    exit(7);
}
