/* Programs that break debuggers, one per mode: each must behave under a
 * tracer exactly as it does alone (same exit status, same stdout).
 *
 *   hostile_target [--gated] MODE
 *
 * Every mode prints "created N" lines whose sum is the number of
 * pthread_create calls the process made (forked children not counted), and
 * only lines that are the same from run to run (no TIDs, no PIDs, no times).
 * Nothing goes to stderr unless a call fails (then exit 3 = check failed).
 * With --gated the program prints "ready" and waits for a line on stdin
 * before doing anything, and prints "held" and waits for another line before
 * it ends, so that a test can attach first and look at the process after
 * the debugger left.
 *
 * Modes:
 *   leader-exit   main starts 3 workers and calls pthread_exit; once the
 *                 leader is a zombie each worker starts and joins a thread;
 *                 the last worker to end ends the process (status 0)
 *   exec-true     a non-leader thread execs /bin/true while another thread
 *                 sleeps and main waits in pthread_join
 *   exec-self     the same, but the thread execs this program in mode
 *                 exec-stage2, which starts and joins 2 threads and exits 4
 *   fork          a thread creates and joins 20 threads while main fork()s
 *                 (the child starts a thread, prints and _exit(3)s) and
 *                 another thread vfork()s (the child prints and _exit(3)s);
 *                 the parents print the children's statuses
 *   raw-clone     a thread made with clone(2) (CLONE_THREAD, own stack, no
 *                 pthread), which sends itself SIGUSR1; then one pthread
 *   signals       pthread_kill of SIGUSR1, SIGUSR2 and SIGRTMIN (three times
 *                 to one thread: queued, so three handler runs) to threads
 *                 that block them until all were sent; main signals itself
 *   sigtrap       a SIGTRAP handler; main raises SIGTRAP 5 times and a thread
 *                 3 times while a third creates 20 threads one by one
 *   int3          the same, but the traps are int3 instructions in the
 *                 program's own code (x86-64 only; elsewhere: raise)
 *   sigtrap-churn a SIGTRAP handler; main creates and joins a thread every
 *                 10 ms for 3 s (its signal mask is all blocked only inside
 *                 each pthread_create), then raises SIGTRAP once
 *   sigtrap-default raise(SIGTRAP) with no handler: killed by SIGTRAP (no
 *                 core file: RLIMIT_CORE is set to 0)
 *   setname       threads renamed by themselves and by main with
 *                 pthread_setname_np (names with spaces and ')', the empty
 *                 name, 15 bytes), main renames itself; a renamed thread
 *                 starts a thread that inherits the name
 *   dlopen        dlopen("libpthread.so.0"), pthread_create and
 *                 pthread_join from dlsym, 3 threads (not in the static
 *                 build, HOSTILE_TARGET_STATIC: a static dlopen of libc's
 *                 own libraries fails)
 */
#define _GNU_SOURCE
#ifndef HOSTILE_TARGET_STATIC
#include <dlfcn.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int gated;
static const char *self_path = "/proc/self/exe";

static void fail(const char *what) __attribute__((noreturn));
static void fail(const char *what)
{
    fprintf(stderr, "hostile_target: %s: %s\n", what, strerror(errno));
    fflush(stderr);
    _exit(3);
}

/* Prints say, then waits for one line on stdin (read byte by byte: nothing
 * past the line is taken from the pipe, so an exec'd image reads the rest). */
static void gate(const char *say)
{
    if (!gated)
        return;
    printf("%s\n", say);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) == 1 && c != '\n')
        ;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

/* A line straight to fd 1, for children of fork and vfork, which must not
 * use the parent's stdio buffer. */
static void raw_say(const char *line)
{
    if (write(1, line, strlen(line)) < 0)
        _exit(3);
}

static pthread_t start(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    errno = pthread_create(&t, NULL, fn, arg);
    if (errno != 0)
        fail("pthread_create");
    return t;
}

static void join(pthread_t t)
{
    errno = pthread_join(t, NULL);
    if (errno != 0)
        fail("pthread_join");
}

static void *nothing(void *arg)
{
    return arg;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- leader-exit ---- */

static atomic_int workers_left = 3;
static atomic_int leader_created = 0;
static pid_t leader_pid;

/* Whether the leader is a zombie: its task's state in /proc. */
static int leader_is_zombie(void)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)leader_pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 1;  /* already reaped from the task list */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 1;
    buf[n] = '\0';
    char *close_paren = strrchr(buf, ')');
    return close_paren != NULL && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

static void *leader_exit_worker(void *arg)
{
    (void)arg;
    int waited = 0;
    while (!leader_is_zombie()) {
        if (++waited > 5000) {
            say("the leader never became a zombie");
            break;
        }
        sleep_ms(1);
    }
    join(start(nothing, NULL));
    atomic_fetch_add(&leader_created, 1);
    if (atomic_fetch_sub(&workers_left, 1) == 1) {
        say("workers done");
        say("created %d", atomic_load(&leader_created));
        gate("held");
    }
    return NULL;
}

static int leader_exit_mode(void)
{
    leader_pid = getpid();
    for (int i = 0; i < 3; ++i) {
        start(leader_exit_worker, NULL);
        atomic_fetch_add(&leader_created, 1);
    }
    say("leader exits");
    pthread_exit(NULL);
}

/* ---- exec-true, exec-self, exec-stage2 ---- */

static void *sleeps_forever(void *arg)
{
    for (;;)
        pause();
    return arg;
}

static void *exec_thread(void *arg)
{
    const char *what = arg;
    say("created 2");
    if (strcmp(what, "true") == 0) {
        char *argv[] = {"true", NULL};
        execv("/bin/true", argv);
    } else {
        char *argv[] = {"hostile_target", gated ? "--gated" : "exec-stage2", gated ? "exec-stage2" : NULL, NULL};
        execv(self_path, argv);
    }
    fail("execv");
}

static int exec_mode(const char *what)
{
    start(sleeps_forever, NULL);
    join(start(exec_thread, (void *)what));
    say("pthread_join of the exec thread returned");
    return 3;
}

static int exec_stage2_mode(void)
{
    say("stage2");
    join(start(nothing, NULL));
    join(start(nothing, NULL));
    say("created 2");
    gate("held");
    return 4;
}

/* ---- fork ---- */

static void *creates_twenty(void *arg)
{
    for (int i = 0; i < 20; ++i)
        join(start(nothing, NULL));
    return arg;
}

static void *vfork_thread(void *arg)
{
    pid_t child = vfork();
    if (child < 0)
        fail("vfork");
    if (child == 0) {
        raw_say("vfork child\n");
        _exit(3);
    }
    int status;
    if (waitpid(child, &status, 0) != child)
        fail("waitpid");
    *(int *)arg = status;
    return NULL;
}

static int fork_mode(void)
{
    pthread_t churn = start(creates_twenty, NULL);
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0)
            _exit(1);
        raw_say("fork child\n");
        _exit(3);
    }
    int status;
    if (waitpid(child, &status, 0) != child)
        fail("waitpid");
    say("fork child: %s %d", WIFEXITED(status) ? "exited" : "killed by",
        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    int vfork_status = -1;
    join(start(vfork_thread, &vfork_status));
    say("vfork child: %s %d", WIFEXITED(vfork_status) ? "exited" : "killed by",
        WIFEXITED(vfork_status) ? WEXITSTATUS(vfork_status) : WTERMSIG(vfork_status));
    join(churn);
    say("created 22");
    gate("held");
    return 0;
}

/* ---- raw-clone ---- */

static atomic_int raw_signals;
static volatile long raw_sum;

static void count_raw_signal(int sig)
{
    (void)sig;
    atomic_fetch_add(&raw_signals, 1);
}

/* Runs on a thread glibc knows nothing of: it shares the leader's TLS, so
 * it makes raw system calls only. */
static int raw_thread(void *arg)
{
    long sum = 0;
    for (long i = 1; i <= 1000; ++i)
        sum += i;
    raw_sum = sum;
    syscall(SYS_tgkill, syscall(SYS_getpid), syscall(SYS_gettid), SIGUSR1);
    return arg == NULL ? 0 : 1;
}

static int raw_clone_mode(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_raw_signal;
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        fail("sigaction");
    const size_t stack_size = 256 * 1024;
    char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        fail("mmap");
    static volatile pid_t tid;  /* set by the kernel at clone, cleared at the thread's exit */
    const int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
                      CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
    if (clone(raw_thread, stack + stack_size, flags, NULL, &tid, NULL, &tid) < 0)
        fail("clone");
    for (int waited = 0; tid != 0; ++waited) {
        if (waited > 10000) {
            say("the raw thread did not end");
            return 3;
        }
        pid_t seen = tid;
        struct timespec ms = {0, 1000000L};
        if (seen != 0)
            syscall(SYS_futex, &tid, FUTEX_WAIT, seen, &ms, NULL, 0);
    }
    munmap(stack, stack_size);
    say("raw thread sum %ld, signals %d", raw_sum, atomic_load(&raw_signals));
    join(start(nothing, NULL));
    say("created 1");
    gate("held");
    return 0;
}

/* ---- signals ---- */

enum { slot_usr1, slot_usr2, slot_rt, slots };
static atomic_int handled[4][slots];
static __thread int my_index;
static pthread_barrier_t all_blocking, all_sent;

static void count_signal(int sig)
{
    int slot = sig == SIGUSR1 ? slot_usr1 : sig == SIGUSR2 ? slot_usr2 : slot_rt;
    atomic_fetch_add(&handled[my_index][slot], 1);
}

static void *blocks_then_takes(void *arg)
{
    my_index = (int)(long)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, SIGRTMIN);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_barrier_wait(&all_blocking);
    pthread_barrier_wait(&all_sent);
    /* Every pending signal is delivered as the mask opens. */
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    return NULL;
}

static void send(pthread_t t, int sig)
{
    errno = pthread_kill(t, sig);
    if (errno != 0)
        fail("pthread_kill");
}

static int signals_mode(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0 || sigaction(SIGUSR2, &sa, NULL) != 0 ||
        sigaction(SIGRTMIN, &sa, NULL) != 0)
        fail("sigaction");
    pthread_barrier_init(&all_blocking, NULL, 4);
    pthread_barrier_init(&all_sent, NULL, 4);
    pthread_t t[4];
    for (long i = 1; i <= 3; ++i)
        t[i] = start(blocks_then_takes, (void *)i);
    pthread_barrier_wait(&all_blocking);
    send(t[1], SIGUSR1);
    send(t[1], SIGRTMIN);
    send(t[2], SIGUSR2);
    for (int i = 0; i < 3; ++i)
        send(t[3], SIGRTMIN);
    send(pthread_self(), SIGUSR2);  /* unblocked here: handled before pthread_kill returns */
    pthread_barrier_wait(&all_sent);
    for (int i = 1; i <= 3; ++i)
        join(t[i]);
    for (int i = 0; i <= 3; ++i)
        say("thread %d: SIGUSR1 %d SIGUSR2 %d SIGRTMIN %d", i, atomic_load(&handled[i][slot_usr1]),
            atomic_load(&handled[i][slot_usr2]), atomic_load(&handled[i][slot_rt]));
    say("created 3");
    gate("held");
    return 0;
}

/* ---- sigtrap, int3, sigtrap-default ---- */

static atomic_int traps;
static int use_int3;

static void count_trap(int sig)
{
    (void)sig;
    atomic_fetch_add(&traps, 1);
}

static void trap(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (use_int3) {
        __asm__ volatile("int3" ::: "memory");
        return;
    }
#endif
    raise(SIGTRAP);
}

static void *traps_three_times(void *arg)
{
    for (int i = 0; i < 3; ++i)
        trap();
    return arg;
}

static int sigtrap_mode(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_trap;
    if (sigaction(SIGTRAP, &sa, NULL) != 0)
        fail("sigaction");
    pthread_t churn = start(creates_twenty, NULL);
    pthread_t other = start(traps_three_times, NULL);
    for (int i = 0; i < 5; ++i)
        trap();
    join(other);
    join(churn);
    say("SIGTRAP handled %d times", atomic_load(&traps));
    say("created 22");
    gate("held");
    return 0;
}

static int sigtrap_churn_mode(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_trap;
    if (sigaction(SIGTRAP, &sa, NULL) != 0)
        fail("sigaction");
    for (int i = 0; i < 300; ++i) {
        join(start(nothing, NULL));
        struct timespec pause_ms = {0, 10 * 1000 * 1000};
        nanosleep(&pause_ms, NULL);
    }
    trap();
    say("SIGTRAP handled %d times", atomic_load(&traps));
    say("created 300");
    gate("held");
    return 0;
}

static int sigtrap_default_mode(void)
{
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    join(start(nothing, NULL));
    say("created 1");
    raise(SIGTRAP);
    say("still alive after SIGTRAP");
    return 0;
}

/* ---- setname ---- */

static pthread_barrier_t named_up, renamed;

static void print_name(const char *who, pthread_t t)
{
    char name[32];
    errno = pthread_getname_np(t, name, sizeof name);
    if (errno != 0)
        fail("pthread_getname_np");
    say("%s: [%s]", who, name);
}

static void *inherits_name(void *arg)
{
    print_name("child of the renamed thread", pthread_self());
    return arg;
}

static void *names_itself(void *arg)
{
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    pthread_barrier_wait(&named_up);
    pthread_barrier_wait(&renamed);
    if ((long)arg == 0)
        join(start(inherits_name, NULL));
    return NULL;
}

static int setname_mode(void)
{
    pthread_barrier_init(&named_up, NULL, 4);
    pthread_barrier_init(&renamed, NULL, 4);
    pthread_t t[3];
    for (long i = 0; i < 3; ++i)
        t[i] = start(names_itself, (void *)i);
    pthread_barrier_wait(&named_up);
    print_name("worker 0", t[0]);
    const char *names[] = {"a b) c", "", "123456789012345"};
    for (int i = 0; i < 3; ++i) {
        errno = pthread_setname_np(t[i], names[i]);
        if (errno != 0)
            fail("pthread_setname_np");
    }
    errno = pthread_setname_np(pthread_self(), ") (main");
    if (errno != 0)
        fail("pthread_setname_np");
    for (int i = 0; i < 3; ++i) {
        char who[16];
        snprintf(who, sizeof who, "worker %d", i);
        print_name(who, t[i]);
    }
    print_name("main", pthread_self());
    pthread_barrier_wait(&renamed);
    for (int i = 0; i < 3; ++i)
        join(t[i]);
    say("created 4");
    gate("held");
    return 0;
}

/* ---- dlopen ---- */

#ifndef HOSTILE_TARGET_STATIC

static void *dlopen_worker(void *arg)
{
    return (void *)((long)arg * 2);
}

static int dlopen_mode(void)
{
    void *lib = dlopen("libpthread.so.0", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "hostile_target: dlopen: %s\n", dlerror());
        return 3;
    }
    int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) = dlsym(lib, "pthread_create");
    int (*join_fn)(pthread_t, void **) = dlsym(lib, "pthread_join");
    if (create == NULL || join_fn == NULL) {
        fprintf(stderr, "hostile_target: dlsym: %s\n", dlerror());
        return 3;
    }
    long total = 0;
    for (long i = 1; i <= 3; ++i) {
        pthread_t t;
        void *result;
        if (create(&t, NULL, dlopen_worker, (void *)i) != 0 || join_fn(t, &result) != 0)
            fail("pthread_create or pthread_join through dlsym");
        total += (long)result;
    }
    say("results %ld", total);
    say("created 3");
    gate("held");
    dlclose(lib);
    return 0;
}
#endif

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--gated") == 0) {
        gated = 1;
        first = 2;
    }
    if (argc != first + 1) {
        fprintf(stderr, "usage: hostile_target [--gated] MODE\n");
        return 2;
    }
    const char *mode = argv[first];
    /* A stage after an exec was let go at the first gate already. */
    if (strcmp(mode, "exec-stage2") != 0)
        gate("ready");
    if (strcmp(mode, "leader-exit") == 0)
        return leader_exit_mode();
    if (strcmp(mode, "exec-true") == 0)
        return exec_mode("true");
    if (strcmp(mode, "exec-self") == 0)
        return exec_mode("self");
    if (strcmp(mode, "exec-stage2") == 0)
        return exec_stage2_mode();
    if (strcmp(mode, "fork") == 0)
        return fork_mode();
    if (strcmp(mode, "raw-clone") == 0)
        return raw_clone_mode();
    if (strcmp(mode, "signals") == 0)
        return signals_mode();
    if (strcmp(mode, "sigtrap") == 0)
        return sigtrap_mode();
    if (strcmp(mode, "int3") == 0) {
        use_int3 = 1;
        return sigtrap_mode();
    }
    if (strcmp(mode, "sigtrap-default") == 0)
        return sigtrap_default_mode();
    if (strcmp(mode, "sigtrap-churn") == 0)
        return sigtrap_churn_mode();
    if (strcmp(mode, "setname") == 0)
        return setname_mode();
#ifndef HOSTILE_TARGET_STATIC
    if (strcmp(mode, "dlopen") == 0)
        return dlopen_mode();
#endif
    fprintf(stderr, "hostile_target: unknown mode %s\n", mode);
    return 2;
}
