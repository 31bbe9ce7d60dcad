/* attach_limit PID: the least a ptrace tool can do to attach to every
 * thread of a process and let it go again -- the limit bench/attach prices
 * tdctl's attach + detach against. PTRACE_SEIZE + PTRACE_INTERRUPT of every
 * task listed in /proc/PID/task (repeated until a pass finds no new one),
 * waitpid() on each task by TID, then PTRACE_DETACH of each. No registers,
 * no memory, no symbols. Exits 0, or 1 with a message. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

static int *tids;      /* seized TIDs, in order */
static int ntids;
static char *seized;   /* seized[tid] != 0: seized */
static int max_tid;

static int seize_pass(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int added = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int tid = atoi(e->d_name);
        if (tid <= 0 || tid >= max_tid || seized[tid])
            continue;
        if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0 || ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0)
            continue;
        seized[tid] = 1;
        tids[ntids++] = tid;
        added++;
    }
    closedir(d);
    return added;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: attach_limit PID\n");
        return 2;
    }
    int pid = atoi(argv[1]);
    max_tid = 4194305;
    seized = calloc((size_t)max_tid, 1);
    tids = calloc((size_t)max_tid, sizeof *tids);
    if (!seized || !tids)
        return 1;
    int total = 0, n;
    while ((n = seize_pass(pid)) > 0)
        total += n;
    if (total == 0) {
        fprintf(stderr, "attach_limit: nothing seized in %d: %s\n", pid, strerror(errno));
        return 1;
    }
    for (int i = 0; i < ntids; ++i) {
        int status;
        while (waitpid(tids[i], &status, __WALL) < 0 && errno == EINTR) {
        }
    }
    for (int i = 0; i < ntids; ++i)
        ptrace(PTRACE_DETACH, tids[i], 0, 0);
    return 0;
}
