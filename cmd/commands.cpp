// The command table and the help text of every command (`help`, `help CMD`).
#include "cmd/commands.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "base/quoting.hpp"
#include "cmd/records.hpp"

namespace tdctl::cmd {

// A data table of every command with its handler and help text: longer
// than 60 lines by nature.
std::span<const command_entry> command_table()
{
    static const std::vector<command_entry> table = {
        {"threads", {"info-threads"}, cmd_threads, stop_use::shares,
         "threads\n"
         "  List every thread: TID, name, thread handle, state, whether it reports events\n"
         "  (traceme), its own event mask, and its start routine. One row per record of the\n"
         "  thread library, by handle: a thread that ended and was not joined yet is a\n"
         "  zombie with no TID. LWPs without a record (no thread library) come from\n"
         "  /proc/PID/task. TIDs are the host's; a target in another PID namespace also\n"
         "  gets its own TIDs (NS-TID)."},
        {"event", {}, cmd_event, stop_use::shares,
         "event addr EVENTS          the reporting address of each event (td_ta_event_addr)\n"
         "event set EVENTS [TID]     add to the global mask, or to thread TID's mask\n"
         "event clear EVENTS [TID]   remove from the global mask, or from thread TID's mask\n"
         "event enable on|off [TID|all]\n"
         "                           event reporting for one thread or every thread (default all)\n"
         "event getmsg [TID]         consume one buffered message (any thread, or TID's)\n"
         "  EVENTS: names such as create or TD_CREATE, case-insensitive, comma-separated, or all.\n"
         "  A thread reports an event only when its reporting is enabled and the event is in\n"
         "  its own mask or the global mask; each thread buffers at most one message."},
        {"stop", {}, cmd_stop, stop_use::shares,
         "stop EVENTS [--for SECONDS]\n"
         "  Plant breakpoints at the events' reporting addresses and run until one is hit.\n"
         "  The whole target is then held: `event getmsg` drains by hand, `continue` resumes\n"
         "  (and removes these breakpoints). Threads must have the events in a mask and\n"
         "  reporting enabled (`event set`, `event enable on all`)."},
        {"watch", {}, cmd_watch, stop_use::shares,
         "watch [EVENTS] [--count N] [--for SECONDS] [--bt[=DEPTH]] [--stream | --stop] [--drop]\n"
         "  Arm the events (default: every event the thread library reports), enable\n"
         "  reporting on every thread and each new one, and print each message as it is\n"
         "  drained. Ends after N messages, after the duration, on Ctrl-C, or when the\n"
         "  target exits; then everything it armed is put back, each thread's time over\n"
         "  the watch is split: on CPU, waiting for a CPU (run queue), off CPU, and the\n"
         "  watch's messages are summarised (as `summary` does for the session).\n"
         "  --bt: each event also carries the reporting thread's call stack (the creator's\n"
         "  for TD_CREATE, the dying thread's for TD_DEATH), at most DEPTH frames (64).\n"
         "  With the agent, threads write events to rings tdctl drains while they run: no\n"
         "  thread stops for an event (the default; --stream insists), and threads born\n"
         "  meanwhile run untraced. An event a full ring cannot take waits for tdctl (or\n"
         "  stops its thread); with --drop it is counted instead, and a `lost` line per\n"
         "  thread gives the counts. --stop, --bt, or no agent (nptl's\n"
         "  breakpoints): each report stops its thread. The first line says which."},
        {"summary", {}, cmd_summary, stop_use::releases,
         "summary [--top N]\n"
         "  The event messages printed so far in the session: counts per event type,\n"
         "  threads created and ended per creating call site (the top N, default 10;\n"
         "  the call site is the return address into the caller of pthread_create),\n"
         "  thread lifetimes (count, min, median, p95, max) per start routine, and the\n"
         "  threads alive now."},
        {"locks", {}, cmd_locks, stop_use::releases,
         "locks [--for SECONDS] [--interval SECONDS] [--top N] [--bt=DEPTH] [--stream | --stop]\n"
         "  User-space lock contention, from the agent's lock events (TD_LOCK_TRY, TD_SLEEP,\n"
         "  TD_READY): per lock its address (and symbol for a static or global object), kind\n"
         "  (mutex, rwlock, spin), contentions (a blocking lock call that found it taken:\n"
         "  TD_LOCK_TRY then TD_SLEEP), trylock failures (pthread_mutex_trylock returned\n"
         "  EBUSY: a TD_LOCK_TRY no TD_SLEEP followed), waits and their total, average and\n"
         "  maximum (TD_SLEEP to TD_READY on the same thread and lock), the holders (owner\n"
         "  field read when the waiter reported), the waiting threads, and the waiters' top 3\n"
         "  call sites as stacks of at most DEPTH frames (16), from the program's call into\n"
         "  pthread (the agent's frames dropped). Most total wait first, the first N locks\n"
         "  (10). One report at the end (the duration, Ctrl-C or the target's exit), or one\n"
         "  per interval. Needs the agent. By default no thread stops: the agent writes each\n"
         "  event with the lock's kind, owner and call site to its thread's ring, and a\n"
         "  call site is one frame. --bt=DEPTH or --stop: each lock event stops its thread\n"
         "  for a moment (waits include that cost), and stacks are deeper."},
        {"stats", {}, cmd_stats, stop_use::releases,
         "stats enable|disable|reset|show\n"
         "stats watch [--interval SECONDS] [--count N]\n"
         "  Thread statistics (td_ta_enable_stats, td_ta_reset_stats, td_ta_get_stats):\n"
         "  nthreads (the thread library's counter), r_concurrency (pthread_setconcurrency's\n"
         "  level), and time averages over the window since enable/reset: nrunnable (LWPs\n"
         "  running or waiting for a CPU), a_concurrency (on a CPU), nlwps (alive), nidle\n"
         "  (alive, not runnable), each as a decimal and a fraction. Enabling resets;\n"
         "  disabling freezes the averages. `stats watch` prints one row per interval."},
        {"rusage", {}, cmd_rusage, stop_use::releases,
         "rusage start|stop\n"
         "rusage collect [TID|all] [--interval SECONDS [--count N]]\n"
         "  Per-thread resource usage, as pthread_getrusage_np: start enables collection,\n"
         "  stop disables it, collect before start fails with ENOSYS, an unknown TID with\n"
         "  ESRCH. Fields Linux does not keep per thread show as n/a."},
        {"top", {}, cmd_top, stop_use::releases,
         "top [--interval SECONDS] [--count N] [--sort COLUMN] [--limit N]\n"
         "  Every thread's use of the CPU, one table per interval (default 1 s; until Ctrl-C\n"
         "  or the target's exit without --count), like `pidstat -t`: %usr and %sys (CPU time\n"
         "  from schedstat, split in stat's utime:stime ratio), %wait (runnable, waiting on a\n"
         "  run queue for a CPU, from schedstat), %off (alive but neither: blocked, sleeping),\n"
         "  each in percent of one CPU over the interval, then cswch/s, nvcswch/s (voluntary\n"
         "  and involuntary context switches), minflt/s and majflt/s. A thread born or ended\n"
         "  inside the interval counts from its birth or up to its exit. The process line is\n"
         "  the process as one process, as pidstat's TGID line: %usr and %sys its CPU time in\n"
         "  percent of one CPU (above 100 with several CPUs busy), the rates its threads'\n"
         "  summed; its %wait and %off are shares of its threads' time alive added together\n"
         "  (the thread-seconds it names). --sort: cpu (%usr+%sys, the default), usr, sys,\n"
         "  wait, off, cswch, nvcswch, minflt, majflt (highest first), tid, name; --limit N\n"
         "  shows the first N.\n"
         "  The target runs throughout; only /proc is read. Needs no `rusage start`."},
        {"lwpinfo", {}, cmd_lwpinfo, stop_use::releases,
         "lwpinfo [TID|all]\n  User and system CPU time of each LWP (_lwp_info), ns resolution."},
        {"bt", {"backtrace"}, cmd_bt, stop_use::shares,
         "bt [TID|all]\n  The call stack of one thread or of every thread (default), unwound with libdw\n"
         "  while the target is held for a moment."},
        {"deadlock", {}, cmd_deadlock, stop_use::shares,
         "deadlock\n"
         "  Hold the target, find every thread blocked in a mutex wait (the futex call of\n"
         "  pthread_mutex_lock and its kin, not a condition variable, semaphore, barrier\n"
         "  or rwlock) or in pthread_join, read each mutex's owner (__owner; the futex\n"
         "  word for robust and PI mutexes) and each joined thread, and print each cycle\n"
         "  of the wait-for graph: every member's TID, name, the mutex it holds (or the\n"
         "  thread joining it) and the mutex it wants (address, static symbol, kind) or\n"
         "  the thread it joins, and its stack. Otherwise \"no deadlock among mutexes\n"
         "  and joins\" with how many threads were blocked on mutexes, in joins and on\n"
         "  other things (not analysed). Every mutex wait is listed with its owner\n"
         "  (\"owner gone\" when that is not a thread of the process). Needs no\n"
         "  agent. Found nothing: exit status 1 when it is a batch's last command."},
        {"sleep", {}, cmd_sleep, stop_use::releases,
         "sleep SECONDS\n  Let the target run for a while (e.g. 2, 1.5, 500ms), servicing it; then each\n"
         "  thread's time over it, split: on CPU, waiting for a CPU (run queue), off CPU."},
        {"continue", {"c", "cont"}, cmd_continue, stop_use::releases,
         "continue\n  Resume a target held by `interrupt`, by a `stop` hit, or at the launch entry point."},
        {"interrupt", {}, cmd_interrupt, stop_use::shares, "interrupt\n  Stop every thread of the target and hold it."},
        {"detach", {}, cmd_detach, stop_use::shares,
         "detach\n  Put back every byte, mask and flag tdctl changed and let the target go."},
        {"kill", {}, cmd_kill, stop_use::releases, "kill\n  Kill the target (SIGKILL)."},
        {"attach", {}, cmd_attach, stop_use::releases,
         "attach PID\n  Attach to process PID once the last target is detached or gone (at the prompt\n"
         "  after `detach`, `kill` or the target's exit)."},
        {"run", {}, cmd_run, stop_use::releases,
         "run PROG [ARGS...]\n  Launch PROG once the last target is detached or gone; it is held at its entry\n"
         "  point (the thread library loaded, no code of its own run yet) until `continue`,\n"
         "  `watch` or `sleep` runs it."},
        {"quit", {"q", "exit"}, cmd_quit, stop_use::shares,
         "quit\n  Leave tdctl. An attached target is detached; a launched one is detached and\n"
         "  waited for."},
        {"help", {"?"}, cmd_help, stop_use::shares, "help [COMMAND]\n  This text, or one command's."},
    };
    return table;
}

const command_entry* find_command(std::string_view word)
{
    for (const auto& c : command_table())
        if (c.name == word || std::ranges::find(c.aliases, word) != c.aliases.end())
            return &c;
    return nullptr;
}

handler find_subcommand(std::span<const subcommand_entry> table, std::string_view word)
{
    for (const auto& s : table)
        if (s.name == word)
            return s.run;
    return nullptr;
}

std::string help_text(const std::string& command)
{
    if (command.empty()) {
        return "Commands:\n"
               "  threads                          list threads\n"
               "  event addr|set|clear|enable|getmsg ...\n"
               "                                   the td_* event calls by hand (help event)\n"
               "  stop EVENTS [--for S]            run until a thread reports one of EVENTS, then hold\n"
               "  watch [EVENTS] [--count N] [--for S] [--bt[=DEPTH]] [--stream | --stop] [--drop]\n"
               "                                   print every event as it happens\n"
               "  summary [--top N]                counts of the events seen, per call site and start routine\n"
               "  locks [--for S] [--interval S] [--top N] [--bt=DEPTH] [--stream | --stop]\n"
               "                                   lock contention per lock: waits, trylock failures,\n"
               "                                   holders, call sites\n"
               "  stats enable|disable|reset|show|watch\n"
               "                                   thread statistics (help stats)\n"
               "  rusage start|stop|collect [TID|all]\n"
               "                                   per-thread resource usage\n"
               "  top [--interval S] [--count N] [--sort COL] [--limit N]\n"
               "                                   per-thread CPU, run-queue wait, off-CPU and rates\n"
               "  lwpinfo [TID|all]                per-LWP user/system time\n"
               "  bt [TID|all]                     call stacks\n"
               "  deadlock                         mutex waits and their cycles (deadlocks)\n"
               "  sleep SECONDS                    let the target run\n"
               "  continue | interrupt             resume / hold the target\n"
               "  detach | kill | quit             end the session\n"
               "  attach PID | run PROG [ARGS]     start another session once the target is gone\n"
               "  help [COMMAND]                   more about one command";
    }
    // By name only: `help event set` is the help of `event`, `help c` has none.
    for (const auto& c : command_table())
        if (c.name == command)
            return std::string(c.help);
    return {};
}

command_status cmd_help(command_context& c, const words& w, const std::string& where)
{
    // `help event set` is the help of `event`: commands have one help text each.
    std::string text = help_text(w.size() >= 2 ? w[1] : "");
    if (text.empty())
        return c.check.usage_error(where, fmt::format("no help for {}", quoted_word(w[1])));
    c.out.print(help_record{text});
    return command_status::ok;
}

}  // namespace tdctl::cmd
