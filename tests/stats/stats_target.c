/*
 * stats_target [--record F] [--wait-start]
 *
 * The target of the statistics, rusage and lwpinfo tests (SPEC §6, §7): a
 * fixture driven by commands on stdin, one per line, each answered by exactly
 * one line on stdout (flushed). One long-lived "worker" thread does the
 * per-thread work (page faults, sleeps, CPU and system time, file writes) so
 * a test can watch one TID's counters move.
 *
 *   ping               answers "pong"
 *   worker             answers "worker <tid>"
 *   burst K MS         starts K threads that each spin for MS ms of wall time,
 *                      joins them; answers "burst <tid>..." (their TIDs)
 *   park N             starts N threads that block until `unpark`; answers
 *                      "parked <total parked>"
 *   unpark             releases and joins every parked thread; answers
 *                      "unparked <n>"
 *   setconcurrency N   pthread_setconcurrency(N); answers "concurrency <M>"
 *                      with M = pthread_getconcurrency()
 *   touch N            the worker maps N fresh pages and writes one byte to
 *                      each (N minor faults at least); answers "touched N"
 *   naps N             the worker sleeps 1 ms N times (N voluntary context
 *                      switches at least); answers "napped N"
 *   spin MS            the worker spins in user space for MS ms of wall time;
 *                      answers "spun <ms>"
 *   sysspin MS         the worker reads /dev/zero (system time) for MS ms of
 *                      wall time; answers "sysspun <ms>"
 *   write KB PATH      the worker writes KB KiB to PATH (created/truncated)
 *                      and fsyncs it; answers "wrote KB"
 *   name TEXT          the worker names itself TEXT (pthread_setname_np, at
 *                      most 15 bytes, may hold spaces and ')'); answers
 *                      "named <tid>"
 *   allspin K MS       every thread spins for MS ms of wall time: main, the
 *                      worker and K new threads (joined after); answers
 *                      "allspun <tid>..." (the new threads' TIDs)
 *   sigcount           answers "sigcount <w> <c>": SIGUSR1s the handler has
 *                      counted on the worker (w) and on the churn driver (c)
 *   churn on|off       starts / stops a thread that keeps creating batches of
 *                      4 short-lived threads and joining them; answers
 *                      "churn on <churner tid>" / "churn off <threads created>"
 *   exec               the worker execs this program again (with the same
 *                      --record); the kernel ends every other thread and the
 *                      worker takes the process id; the new image answers
 *                      "execd <pid>" once its own worker runs
 *   exec-main          the same, exec'd by the main thread
 *   quit               records "done", answers "bye", exits 0
 * Anything else answers "error <why>". End of file on stdin acts like quit.
 *
 * Records (tests/fixtures/README.md format): "start <pid>";
 * "thread <tid> <pthread_t> worker" for the worker, "... burst" per burst
 * thread, "... parked" per parked thread, "... churner" for the churn
 * driver (churned threads are not recorded: too many); "signal-got <tid> 10"
 * per counted SIGUSR1 (written by the worker after its job loop notices);
 * "done" at quit.
 */
#include "../fixtures/fixture_common.h"

#include <signal.h>
#include <sys/mman.h>

#define MAX_PARKED 512

enum job_kind { JOB_NONE, JOB_TOUCH, JOB_NAPS, JOB_SPIN, JOB_SYSSPIN, JOB_WRITE, JOB_NAME, JOB_EXEC };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;

/* The worker's job slot: main posts, the worker runs it and clears it. */
static enum job_kind job = JOB_NONE;
static long job_arg;
static char job_path[400];
static char job_name[16];   /* the kernel's comm: 15 bytes and the NUL */
static int job_rc;          /* JOB_NAME: pthread_setname_np's result */
static int job_done;
static pid_t worker_tid;

static volatile sig_atomic_t sig_count;           /* SIGUSR1s handled on the worker */
static volatile sig_atomic_t churner_sig_count;   /* ... and on the churn driver */
static pid_t churner_tid;

static pthread_t parked[MAX_PARKED];
static int parked_count;
static int unpark_flag;

static pthread_t churn_thread;
static int churn_running;
static int churn_stop;
static long churn_created;

static void answer(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void answer(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static void on_usr1(int sig)
{
    (void)sig;
    pid_t self = fx_gettid();
    if (self == worker_tid)
        sig_count++;
    else if (self == churner_tid)
        churner_sig_count++;
}

static void spin_for_ms(long ms)
{
    volatile unsigned long counter = 0;
    long long end = fx_now_ms() + ms;
    while (fx_now_ms() < end) {
        for (int i = 0; i < 10000; i++)
            counter++;
    }
}

static void sysspin_for_ms(long ms)
{
    static char buf[1 << 20];
    long long end = fx_now_ms() + ms;
    int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fx_fail("open /dev/zero: %s", strerror(errno));
    while (fx_now_ms() < end) {
        if (read(fd, buf, sizeof buf) < 0 && errno != EINTR)
            fx_fail("read /dev/zero: %s", strerror(errno));
    }
    close(fd);
}

static void touch_pages(long n)
{
    long page = sysconf(_SC_PAGESIZE);
    /* Leaked on purpose: unmapping would let a later touch reuse the pages. */
    char *p = mmap(NULL, (size_t)(n * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fx_fail("mmap %ld pages: %s", n, strerror(errno));
    for (long i = 0; i < n; i++)
        p[i * page] = 1;
}

static void write_file(long kb, const char *path)
{
    static char buf[1024];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fx_fail("open %s: %s", path, strerror(errno));
    memset(buf, 'x', sizeof buf);
    for (long i = 0; i < kb; i++)
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
            fx_fail("write %s: %s", path, strerror(errno));
    if (fsync(fd) != 0)
        fx_fail("fsync %s: %s", path, strerror(errno));
    close(fd);
}

/* The worker execs this program again: the kernel ends every other thread
 * and gives the worker the process id. stdin and stdout stay, so the new
 * image goes on answering; it announces itself with "execd <pid>". */
static void exec_self(void)
{
    char *args[5];
    int n = 0;

    args[n++] = (char *)"stats_target";
    if (fx_record_path) {
        args[n++] = (char *)"--record";
        args[n++] = (char *)fx_record_path;
    }
    args[n++] = (char *)"--after-exec";
    args[n] = NULL;
    fflush(stdout);
    execv("/proc/self/exe", args);
    fx_fail("execv /proc/self/exe: %s", strerror(errno));
}

static void *worker_main(void *arg)
{
    int recorded = 0;
    (void)arg;
    fx_record_self("worker");
    pthread_mutex_lock(&lock);
    worker_tid = fx_gettid();
    pthread_cond_broadcast(&changed);
    for (;;) {
        while (job == JOB_NONE) {
            /* Wake now and then to record signals counted meanwhile. */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            pthread_cond_timedwait(&changed, &lock, &until);
            while (recorded < sig_count) {
                fx_record("signal-got %d 10", (int)worker_tid);
                recorded++;
            }
        }
        enum job_kind k = job;
        long a = job_arg;
        pthread_mutex_unlock(&lock);
        switch (k) {
        case JOB_TOUCH:
            touch_pages(a);
            break;
        case JOB_NAPS:
            for (long i = 0; i < a; i++)
                fx_sleep_ms(1);
            break;
        case JOB_SPIN:
            spin_for_ms(a);
            break;
        case JOB_SYSSPIN:
            sysspin_for_ms(a);
            break;
        case JOB_WRITE:
            write_file(a, job_path);
            break;
        case JOB_NAME:
            job_rc = pthread_setname_np(pthread_self(), job_name);
            break;
        case JOB_EXEC:
            exec_self();
            break;
        case JOB_NONE:
            break;
        }
        pthread_mutex_lock(&lock);
        job = JOB_NONE;
        job_done = 1;
        pthread_cond_broadcast(&changed);
    }
    return NULL;
}

/* Runs one job on the worker and waits for it. */
static void run_job(enum job_kind k, long arg)
{
    pthread_mutex_lock(&lock);
    job = k;
    job_arg = arg;
    job_done = 0;
    pthread_cond_broadcast(&changed);
    while (!job_done)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

struct burst_arg {
    long ms;
    pid_t tid;
};

static void *burst_main(void *arg)
{
    struct burst_arg *b = arg;
    b->tid = fx_gettid();
    fx_record_self("burst");
    spin_for_ms(b->ms);
    return NULL;
}

static void do_burst(long k, long ms)
{
    pthread_t *t = calloc((size_t)k, sizeof *t);
    struct burst_arg *args = calloc((size_t)k, sizeof *args);
    char line[8192];
    size_t used;

    if (!t || !args)
        fx_fail("out of memory");
    for (long i = 0; i < k; i++) {
        args[i].ms = ms;
        fx_create(&t[i], NULL, burst_main, &args[i]);
    }
    for (long i = 0; i < k; i++)
        fx_join(t[i]);
    used = (size_t)snprintf(line, sizeof line, "burst");
    for (long i = 0; i < k && used < sizeof line; i++)
        used += (size_t)snprintf(line + used, sizeof line - used, " %d", (int)args[i].tid);
    answer("%s", line);
    free(t);
    free(args);
}

static void do_allspin(long k, long ms)
{
    pthread_t *t = calloc((size_t)k, sizeof *t);
    struct burst_arg *args = calloc((size_t)k, sizeof *args);
    char line[8192];
    size_t used;

    if (!t || !args)
        fx_fail("out of memory");
    /* The worker spins too: post its job without waiting for it. */
    pthread_mutex_lock(&lock);
    job = JOB_SPIN;
    job_arg = ms;
    job_done = 0;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    for (long i = 0; i < k; i++) {
        args[i].ms = ms;
        fx_create(&t[i], NULL, burst_main, &args[i]);
    }
    spin_for_ms(ms);
    for (long i = 0; i < k; i++)
        fx_join(t[i]);
    pthread_mutex_lock(&lock);
    while (!job_done)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    used = (size_t)snprintf(line, sizeof line, "allspun");
    for (long i = 0; i < k && used < sizeof line; i++)
        used += (size_t)snprintf(line + used, sizeof line - used, " %d", (int)args[i].tid);
    answer("%s", line);
    free(t);
    free(args);
}

static void *parked_main(void *arg)
{
    (void)arg;
    fx_record_self("parked");
    pthread_mutex_lock(&lock);
    while (!unpark_flag)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void do_park(long n)
{
    if (parked_count + n > MAX_PARKED) {
        answer("error at most %d parked threads", MAX_PARKED);
        return;
    }
    for (long i = 0; i < n; i++)
        fx_create(&parked[parked_count++], NULL, parked_main, NULL);
    answer("parked %d", parked_count);
}

static void do_unpark(void)
{
    int n = parked_count;
    pthread_mutex_lock(&lock);
    unpark_flag = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++)
        fx_join(parked[i]);
    parked_count = 0;
    unpark_flag = 0;
    answer("unparked %d", n);
}

static void *short_main(void *arg)
{
    volatile unsigned long counter = 0;
    (void)arg;
    for (int i = 0; i < 20000; i++)
        counter++;
    return NULL;
}

static void *churner_main(void *arg)
{
    pthread_t t[4];
    pthread_attr_t attr;
    (void)arg;
    fx_record_self("churner");
    __atomic_store_n(&churner_tid, fx_gettid(), __ATOMIC_RELAXED);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    while (!__atomic_load_n(&churn_stop, __ATOMIC_RELAXED)) {
        for (int i = 0; i < 4; i++)
            fx_create(&t[i], &attr, short_main, NULL);
        for (int i = 0; i < 4; i++)
            fx_join(t[i]);
        __atomic_add_fetch(&churn_created, 4, __ATOMIC_RELAXED);
    }
    pthread_attr_destroy(&attr);
    return NULL;
}

static void do_churn(const char *what)
{
    if (strcmp(what, "on") == 0) {
        if (churn_running) {
            answer("error churn is already on");
            return;
        }
        churn_stop = 0;
        churner_tid = 0;
        fx_create(&churn_thread, NULL, churner_main, NULL);
        churn_running = 1;
        while (__atomic_load_n(&churner_tid, __ATOMIC_RELAXED) == 0)
            fx_sleep_ms(1);
        answer("churn on %d", (int)churner_tid);
    } else if (strcmp(what, "off") == 0) {
        if (!churn_running) {
            answer("error churn is not on");
            return;
        }
        __atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
        fx_join(churn_thread);
        churn_running = 0;
        answer("churn off %ld", __atomic_load_n(&churn_created, __ATOMIC_RELAXED));
    } else {
        answer("error usage: churn on|off");
    }
}

/* Parses "N" or "N M" (non-negative); returns how many numbers were read. */
static int parse_numbers(const char *text, long *a, long *b)
{
    char *end;
    int n = 0;

    errno = 0;
    *a = strtol(text, &end, 10);
    if (errno || end == text || *a < 0)
        return 0;
    n = 1;
    if (b && *end == ' ') {
        const char *second = end + 1;
        *b = strtol(second, &end, 10);
        if (errno || end == second || *b < 0)
            return 0;
        n = 2;
    }
    return *end == '\0' ? n : 0;
}

int main(int argc, char **argv)
{
    char line[512];
    pthread_t worker;
    struct sigaction sa;
    long a, b;
    int first = fx_parse_common(argc, argv, 1, NULL);
    int after_exec = 0;

    if (argc == first + 1 && strcmp(argv[first], "--after-exec") == 0)
        after_exec = 1;
    else if (argc != first) {
        fprintf(stderr, "usage: stats_target [--record F] [--wait-start]\n");
        return FX_EXIT_USAGE;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);

    fx_create(&worker, NULL, worker_main, NULL);
    pthread_mutex_lock(&lock);
    while (worker_tid == 0)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    if (after_exec)
        answer("execd %d", (int)getpid());

    while (fgets(line, sizeof line, stdin)) {
        size_t len = strlen(line);

        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        if (strcmp(line, "ping") == 0) {
            answer("pong");
        } else if (strcmp(line, "worker") == 0) {
            answer("worker %d", (int)worker_tid);
        } else if (strncmp(line, "burst ", 6) == 0 && parse_numbers(line + 6, &a, &b) == 2 && a > 0) {
            do_burst(a, b);
        } else if (strncmp(line, "allspin ", 8) == 0 && parse_numbers(line + 8, &a, &b) == 2) {
            do_allspin(a, b);
        } else if (strncmp(line, "park ", 5) == 0 && parse_numbers(line + 5, &a, NULL) == 1) {
            do_park(a);
        } else if (strcmp(line, "unpark") == 0) {
            do_unpark();
        } else if (strncmp(line, "setconcurrency ", 15) == 0 && parse_numbers(line + 15, &a, NULL) == 1) {
            int rc = pthread_setconcurrency((int)a);
            if (rc != 0)
                answer("error pthread_setconcurrency: %s", strerror(rc));
            else
                answer("concurrency %d", pthread_getconcurrency());
        } else if (strncmp(line, "touch ", 6) == 0 && parse_numbers(line + 6, &a, NULL) == 1) {
            run_job(JOB_TOUCH, a);
            answer("touched %ld", a);
        } else if (strncmp(line, "naps ", 5) == 0 && parse_numbers(line + 5, &a, NULL) == 1) {
            run_job(JOB_NAPS, a);
            answer("napped %ld", a);
        } else if (strncmp(line, "spin ", 5) == 0 && parse_numbers(line + 5, &a, NULL) == 1) {
            run_job(JOB_SPIN, a);
            answer("spun %ld", a);
        } else if (strncmp(line, "sysspin ", 8) == 0 && parse_numbers(line + 8, &a, NULL) == 1) {
            run_job(JOB_SYSSPIN, a);
            answer("sysspun %ld", a);
        } else if (strncmp(line, "write ", 6) == 0) {
            char *end;
            errno = 0;
            a = strtol(line + 6, &end, 10);
            if (errno || end == line + 6 || a < 0 || *end != ' ' || end[1] == '\0' ||
                strlen(end + 1) >= sizeof job_path) {
                answer("error usage: write KB PATH");
                continue;
            }
            strcpy(job_path, end + 1);
            run_job(JOB_WRITE, a);
            answer("wrote %ld", a);
        } else if (strncmp(line, "name ", 5) == 0) {
            if (line[5] == '\0' || strlen(line + 5) >= sizeof job_name) {
                answer("error usage: name TEXT (1 to %d bytes)", (int)sizeof job_name - 1);
                continue;
            }
            strcpy(job_name, line + 5);
            run_job(JOB_NAME, 0);
            if (job_rc != 0)
                answer("error pthread_setname_np: %s", strerror(job_rc));
            else
                answer("named %d", (int)worker_tid);
        } else if (strcmp(line, "exec-main") == 0) {
            /* The main thread execs: answered by the new image too. */
            exec_self();
        } else if (strcmp(line, "exec") == 0) {
            /* Answered by the new image ("execd <pid>"); this one ends. */
            pthread_mutex_lock(&lock);
            job = JOB_EXEC;
            job_done = 0;
            pthread_cond_broadcast(&changed);
            pthread_mutex_unlock(&lock);
            for (;;)
                pause();
        } else if (strcmp(line, "sigcount") == 0) {
            answer("sigcount %d %d", (int)sig_count, (int)churner_sig_count);
        } else if (strncmp(line, "churn ", 6) == 0) {
            do_churn(line + 6);
        } else if (strcmp(line, "quit") == 0) {
            fx_record("done");
            answer("bye");
            return 0;
        } else {
            answer("error unknown command: %s", line);
        }
    }
    fx_record("done");
    return 0;
}
