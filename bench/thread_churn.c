/* thread_churn N [BATCH]: create and join N threads, BATCH at a time
 * (default 1: strictly one after another), then exit 0. Prints nothing.
 * Each thread does no work, so the run time is thread creation, exit and
 * join -- and, under a tracer, the stops those cost (clone, exit, and with
 * events armed one TD_CREATE and one TD_DEATH breakpoint hit per thread).
 * With THREAD_CHURN_WAIT=1 in the environment it first reads one byte from
 * stdin, so a tracer can attach before the first thread is made. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void* nothing(void* arg)
{
    return arg;
}

static long parse_positive(const char* text, const char* what)
{
    char* end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || v <= 0) {
        fprintf(stderr, "thread_churn: bad %s '%s' (a positive integer)\n", what, text);
        exit(64);
    }
    return v;
}

int main(int argc, char** argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: thread_churn N [BATCH]\n");
        return 64;
    }
    long n = parse_positive(argv[1], "N");
    long batch = argc == 3 ? parse_positive(argv[2], "BATCH") : 1;
    if (batch > 64)
        batch = 64;

    const char* wait = getenv("THREAD_CHURN_WAIT");
    if (wait != NULL && wait[0] == '1') {
        char go;
        if (fread(&go, 1, 1, stdin) != 1)
            return 1;
    }

    pthread_t ids[64];
    for (long done = 0; done < n;) {
        long k = n - done < batch ? n - done : batch;
        for (long i = 0; i < k; ++i) {
            int rc = pthread_create(&ids[i], NULL, nothing, NULL);
            if (rc != 0) {
                fprintf(stderr, "thread_churn: pthread_create: error %d after %ld threads\n", rc, done + i);
                return 1;
            }
        }
        for (long i = 0; i < k; ++i)
            pthread_join(ids[i], NULL);
        done += k;
    }
    return 0;
}
