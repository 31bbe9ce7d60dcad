/* A minimal job-control shell for tests, run as the session leader of a
 * pseudo-terminal: `job_shell PROG [ARGS...]` starts PROG in a process group
 * of its own in the background of the terminal, as `PROG &` in an
 * interactive shell does, then reads commands from the terminal:
 *
 *   fg      give the terminal to the job (and continue it if it is stopped),
 *           as a shell's `fg` does; the shell reads nothing until the job
 *           stops or ends
 *   bg      continue a stopped job in the background ("job continued")
 *
 * With `job_shell --tostop PROG...` the terminal's TOSTOP flag is set first
 * (`stty tostop`: a background job that writes to the terminal is stopped).
 *
 * It prints "job <pid> background" at the start, "job foreground" before
 * handing over the terminal, "job stopped <signal>" when the job stops (then
 * it takes the terminal back and restores its own modes, as shells do), and
 * "job exited <raw wait status>" when the job ends; then it exits 0.
 * Unknown commands are answered "error <command>". */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static void say(const char* text)
{
    fputs(text, stdout);
    fflush(stdout);
}

int main(int argc, char** argv)
{
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--tostop") == 0)
        first = 2;
    if (argc <= first) {
        fputs("usage: job_shell [--tostop] PROG [ARGS...]\n", stderr);
        return 2;
    }
    /* A shell is never stopped by its own terminal. */
    signal(SIGTTOU, SIG_IGN);
    signal(SIGTTIN, SIG_IGN);
    signal(SIGTSTP, SIG_IGN);
    struct termios modes;
    if (tcgetattr(STDIN_FILENO, &modes) != 0) {
        perror("job_shell: tcgetattr");
        return 2;
    }
    if (first == 2) {
        modes.c_lflag |= TOSTOP;
        tcsetattr(STDIN_FILENO, TCSADRAIN, &modes);
    }

    pid_t job = fork();
    if (job < 0) {
        perror("job_shell: fork");
        return 2;
    }
    if (job == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGTTOU, SIG_DFL);
        signal(SIGTTIN, SIG_DFL);
        signal(SIGTSTP, SIG_DFL);
        execv(argv[first], argv + first);
        perror("job_shell: exec");
        _exit(127);
    }
    setpgid(job, job);
    printf("job %d background\n", (int)job);
    fflush(stdout);

    int foreground = 0, stopped = 0;
    char line[256];
    size_t used = 0;
    for (;;) {
        int status = 0;
        pid_t r = waitpid(job, &status, WNOHANG | WUNTRACED);
        if (r == job && (WIFEXITED(status) || WIFSIGNALED(status))) {
            tcsetpgrp(STDIN_FILENO, getpgrp());
            tcsetattr(STDIN_FILENO, TCSADRAIN, &modes);
            printf("job exited %d\n", status);
            fflush(stdout);
            return 0;
        }
        if (r == job && WIFSTOPPED(status)) {
            tcsetpgrp(STDIN_FILENO, getpgrp());
            tcsetattr(STDIN_FILENO, TCSADRAIN, &modes);
            foreground = 0;
            stopped = 1;
            printf("job stopped %d\n", WSTOPSIG(status));
            fflush(stdout);
        }
        if (foreground) {
            usleep(10000); /* the terminal is the job's */
            continue;
        }
        struct pollfd p = {STDIN_FILENO, POLLIN, 0};
        if (poll(&p, 1, 10) <= 0)
            continue;
        ssize_t n = read(STDIN_FILENO, line + used, sizeof line - 1 - used);
        if (n <= 0) {
            usleep(10000);
            continue;
        }
        used += (size_t)n;
        line[used] = '\0';
        char* nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = '\0';
            if (nl > line && nl[-1] == '\r')
                nl[-1] = '\0';
            if (strcmp(line, "fg") == 0) {
                say("job foreground\n");
                tcsetpgrp(STDIN_FILENO, job);
                foreground = 1;
                if (stopped)
                    kill(-job, SIGCONT);
                stopped = 0;
            } else if (strcmp(line, "bg") == 0) {
                kill(-job, SIGCONT);
                stopped = 0;
                say("job continued\n");
            } else if (line[0] != '\0') {
                printf("error %s\n", line);
                fflush(stdout);
            }
            size_t rest = used - (size_t)(nl + 1 - line);
            memmove(line, nl + 1, rest + 1);
            used = rest;
        }
        if (used == sizeof line - 1)
            used = 0; /* a line too long for a command: dropped */
    }
}
