/* A process that ends while its threads keep creating threads, for the
 * controller's handling of clones whose parent dies before reporting them.
 *   group_exit_target exit SECONDS   four threads create detached threads in a
 *                                    loop; main calls exit(7) after SECONDS
 *   group_exit_target exec SECONDS   the same, but a fifth thread execs
 *                                    `/bin/sh -c 'exit 5'` after SECONDS
 * Prints "ready" once the spawners run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double seconds = 1.0;

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
    if (argc != 3 || (strcmp(argv[1], "exit") != 0 && strcmp(argv[1], "exec") != 0)) {
        fprintf(stderr, "usage: group_exit_target exit|exec SECONDS\n");
        return 2;
    }
    seconds = atof(argv[2]);
    pthread_t t;
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
