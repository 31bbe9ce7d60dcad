/* hit_limit PID: the least a tracer can do to see glibc's TD_CREATE and
 * TD_DEATH reports of a running thread_churn (THREAD_CHURN_WAIT=1, attached
 * before it starts): the per-thread cost floor tdctl's `watch` is compared
 * with in bench/run_bench.
 *
 * It seizes the one thread there is with clone and exit tracking, sets
 * glibc's global event mask (__nptl_threads_events) and the thread's
 * report_events flag, writes `int3; ret` over the two reporting functions
 * (glibc 2.36: a one-byte `ret` and padding, so the thread resumes with no
 * register change), then waits with one blocking wait4 per stop. Per hit:
 * the wait, the register read, for TD_CREATE one read of the list head (the
 * new thread's record), one vectored write (the buffer emptied, the list
 * head cleared, for TD_CREATE the new thread's flag on), the restart.
 * Nothing is printed per event, nothing is put back at the end (the target
 * exits), and the message list is taken to hold only the report at hand:
 * true for thread_churn's one creator, not in general.
 *
 * The target's libc is this process's libc (same machine, same file):
 * symbol addresses are this process's, moved by the difference of the two
 * load addresses. Field offsets come from glibc's own _thread_db_*
 * descriptors ({bits, count, byte offset}), read in this process.
 * Prints "hit_limit: C creates, D deaths" and exits 0 once the target ends.
 *
 * hit_limit --no-breakpoints PID: the same tracer with nothing armed (no
 * mask, no flag, no trap bytes): clone and exit tracking alone, the floor
 * for a tracer that follows threads without their reports. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

enum { td_create = 8, td_death = 9 };

static void die(const char* what)
{
    fprintf(stderr, "hit_limit: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void* private_symbol(const char* name)
{
    void* p = dlvsym(RTLD_DEFAULT, name, "GLIBC_PRIVATE");
    if (p == NULL) {
        fprintf(stderr, "hit_limit: %s not found in this libc\n", name);
        exit(1);
    }
    return p;
}

/* The byte offset from glibc's descriptor of a field. */
static uint32_t field_offset(const char* descriptor)
{
    const uint32_t* d = private_symbol(descriptor);
    return d[2];
}

/* The load address of libc.so.6 in process `pid` (its first mapping). */
static uintptr_t libc_base(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE* f = fopen(path, "r");
    if (f == NULL)
        die(path);
    uintptr_t base = 0;
    while (base == 0 && fgets(line, sizeof line, f) != NULL) {
        unsigned long start = 0, offset = 0;
        if (strstr(line, "/libc.so.6") != NULL && sscanf(line, "%lx-%*x %*s %lx", &start, &offset) == 2 &&
            offset == 0)
            base = start;
    }
    fclose(f);
    if (base == 0) {
        fprintf(stderr, "hit_limit: no libc.so.6 in %s\n", path);
        exit(1);
    }
    return base;
}

static void write_target(pid_t pid, uintptr_t at, const void* bytes, size_t n)
{
    struct iovec local = {(void*)bytes, n}, remote = {(void*)at, n};
    if (process_vm_writev(pid, &local, 1, &remote, 1, 0) != (ssize_t)n)
        die("process_vm_writev");
}

int main(int argc, char** argv)
{
    const int armed = !(argc == 3 && strcmp(argv[1], "--no-breakpoints") == 0);
    if (argc != 2 && armed) {
        fprintf(stderr, "usage: hit_limit [--no-breakpoints] PID\n");
        return 64;
    }
    const pid_t pid = (pid_t)atol(argv[argc - 1]);
    Dl_info self;
    if (dladdr((void*)&printf, &self) == 0)
        die("dladdr");
    const uintptr_t shift = libc_base(pid) - (uintptr_t)self.dli_fbase;
    const uintptr_t create_site = (uintptr_t)private_symbol("__nptl_create_event") + shift;
    const uintptr_t death_site = (uintptr_t)private_symbol("__nptl_death_event") + shift;
    const uintptr_t global_mask = (uintptr_t)private_symbol("__nptl_threads_events") + shift;
    const uintptr_t last_event = (uintptr_t)private_symbol("__nptl_last_event") + shift;
    const uint32_t flag_at = field_offset("_thread_db_pthread_report_events");
    const uint32_t buf_at = field_offset("_thread_db_pthread_eventbuf");
    const uint32_t num_at = buf_at + field_offset("_thread_db_td_eventbuf_t_eventnum");
    const uint32_t data_at = buf_at + field_offset("_thread_db_td_eventbuf_t_eventdata");
    const uint32_t next_at = field_offset("_thread_db_pthread_nextevent");

    if (ptrace(PTRACE_SEIZE, pid, 0, (void*)(long)(PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXIT)) != 0)
        die("PTRACE_SEIZE");
    if (ptrace(PTRACE_INTERRUPT, pid, 0, 0) != 0)
        die("PTRACE_INTERRUPT");
    int status = 0;
    if (waitpid(pid, &status, __WALL) != pid)
        die("waitpid");

    if (!armed) {
        if (ptrace(PTRACE_CONT, pid, 0, 0) != 0)
            die("PTRACE_CONT");
        long clones = 0;
        for (;;) {
            pid_t tid = waitpid(-1, &status, __WALL);
            if (tid < 0) {
                if (errno == EINTR)
                    continue;
                break;
            }
            if (WIFEXITED(status) || WIFSIGNALED(status)) {
                if (tid == pid)
                    break;
                continue;
            }
            int sig = WSTOPSIG(status), event = status >> 16, deliver = 0;
            if (event == PTRACE_EVENT_CLONE) {
                unsigned long child = 0;
                (void)ptrace(PTRACE_GETEVENTMSG, tid, 0, &child);
                ++clones;
            } else if (event == 0 && sig != SIGSTOP) {
                deliver = sig;
            }
            (void)ptrace(PTRACE_CONT, tid, 0, (void*)(long)deliver);
        }
        printf("hit_limit: %ld clones, nothing armed\n", clones);
        return 0;
    }

    /* Reporting on: the global mask, the one thread's flag, the two sites. */
    const uint32_t mask[2] = {(1u << (td_create - 1)) | (1u << (td_death - 1)), 0};
    write_target(pid, global_mask, mask, sizeof mask);
    struct user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, pid, 0, &regs) != 0)
        die("PTRACE_GETREGS");
    const uint8_t on = 1;
    write_target(pid, regs.fs_base + flag_at, &on, 1);
    char mem_path[64];
    snprintf(mem_path, sizeof mem_path, "/proc/%d/mem", (int)pid);
    int mem = open(mem_path, O_RDWR | O_CLOEXEC);
    if (mem < 0)
        die(mem_path);
    const uint8_t trap_ret[2] = {0xcc, 0xc3};
    for (int i = 0; i < 2; ++i) {
        uintptr_t site = i == 0 ? create_site : death_site;
        uint8_t was = 0;
        if (pread(mem, &was, 1, (off_t)site) != 1 || was != 0xc3) {
            fprintf(stderr, "hit_limit: the reporting function at %#" PRIxPTR " is not a one-byte ret\n", site);
            return 1;
        }
        if (pwrite(mem, trap_ret, 2, (off_t)site) != 2)
            die("pwrite");
    }
    if (ptrace(PTRACE_CONT, pid, 0, 0) != 0)
        die("PTRACE_CONT");

    long creates = 0, deaths = 0;
    for (;;) {
        pid_t tid = waitpid(-1, &status, __WALL);
        if (tid < 0) {
            if (errno == EINTR)
                continue;
            break;  /* ECHILD: every task is gone */
        }
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            if (tid == pid)
                break;
            continue;
        }
        int sig = WSTOPSIG(status);
        int event = status >> 16;
        int deliver = 0;
        if (event == PTRACE_EVENT_CLONE) {
            unsigned long child = 0;
            (void)ptrace(PTRACE_GETEVENTMSG, tid, 0, &child);
        } else if (event == 0 && sig == SIGTRAP) {
            if (ptrace(PTRACE_GETREGS, tid, 0, &regs) != 0)
                continue;
            const uint64_t zero[2] = {0, 0};
            uintptr_t record = regs.fs_base;
            if (regs.rip - 1 == create_site) {
                /* The new thread's record is the list's head. */
                struct iovec local = {&record, sizeof record}, remote = {(void*)last_event, sizeof record};
                if (process_vm_readv(tid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof record)
                    die("process_vm_readv");
                ++creates;
            } else if (regs.rip - 1 == death_site) {
                ++deaths;
            } else {
                deliver = SIGTRAP;
            }
            if (deliver == 0) {
                const uint8_t flag = regs.rip - 1 == create_site ? 1 : 0;
                struct iovec local[4] = {{(void*)zero, 4}, {(void*)zero, 8}, {(void*)zero, 8}, {(void*)&flag, 1}};
                struct iovec remote[4] = {{(void*)(record + num_at), 4},
                                          {(void*)(record + data_at), 8},
                                          {(void*)last_event, 8},
                                          {(void*)(record + flag_at), 1}};
                if (process_vm_writev(tid, local, 4, remote, 4, 0) != 21)
                    die("process_vm_writev");
                (void)next_at;  /* the list holds one record: its link is already null */
            }
        } else if (event == 0 && sig != SIGTRAP && sig != SIGSTOP) {
            deliver = sig;
        }
        (void)ptrace(PTRACE_CONT, tid, 0, (void*)(long)deliver);
    }
    printf("hit_limit: %ld creates, %ld deaths\n", creates, deaths);
    return 0;
}
