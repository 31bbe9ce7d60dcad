/* stop_cost [K]: what one ptrace stop costs on this machine, the unit SPEC §4
 * prices a breakpoint hit in. A traced child executes `int3` K times (default
 * 20000); the parent waits for each SIGTRAP stop and resumes it with
 * PTRACE_CONT -- one trap, one waitpid, one resume, no register change, the
 * same round trip as a hit on a `cc c3` site. Prints one line:
 *   stop_us <microseconds per stop>
 * Exits 0, or 1 with a message when tracing is not possible. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int fail(const char* what)
{
    fprintf(stderr, "stop_cost: %s: %s\n", what, strerror(errno));
    return 1;
}

int main(int argc, char** argv)
{
    long k = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
    if (k <= 0) {
        fprintf(stderr, "usage: stop_cost [K]\n");
        return 64;
    }
    pid_t child = fork();
    if (child < 0)
        return fail("fork");
    if (child == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0)
            _exit(3);
        raise(SIGSTOP);
        for (long i = 0; i < k; ++i)
            __asm__ volatile("int3");
        _exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, __WALL) != child || !WIFSTOPPED(status)) {
        fprintf(stderr, "stop_cost: the child did not stop (status 0x%x)\n", status);
        return 1;
    }
    ptrace(PTRACE_SETOPTIONS, child, NULL, (void*)(long)PTRACE_O_EXITKILL);
    if (ptrace(PTRACE_CONT, child, NULL, NULL) != 0)
        return fail("PTRACE_CONT");
    double start = now_us();
    long stops = 0;
    for (;;) {
        if (waitpid(child, &status, __WALL) != child)
            return fail("waitpid");
        if (!WIFSTOPPED(status))
            break;
        ++stops;
        /* The trap's SIGTRAP is not passed on: resuming with signal 0 goes on
         * after the int3, as tdctl does after a hit on a `cc c3` site. */
        if (ptrace(PTRACE_CONT, child, NULL, NULL) != 0)
            return fail("PTRACE_CONT");
    }
    double elapsed = now_us() - start;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || stops != k) {
        fprintf(stderr, "stop_cost: child ended with status 0x%x after %ld of %ld stops\n", status, stops, k);
        return 1;
    }
    printf("stop_us %.3f\n", elapsed / (double)stops);
    return 0;
}
