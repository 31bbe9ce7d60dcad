// The traced process: an owner object created only by attach() or launch().
// It seizes every task, runs the one wait loop, keeps breakpoint sites, and
// its destructor (or detach()) puts back every byte it wrote and detaches.
//
// Run control is non-stop: each task stops and resumes on its own. Stops the
// owner must see come out of next_event() as stop_event values with the
// task(s) left stopped until resume(); everything else (signals passed on,
// group-stops kept with PTRACE_LISTEN, fork children cleaned and detached,
// stale interrupts) is handled here.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/types.h>

#include "base/types.hpp"
#include "base/unique_fd.hpp"
#include "ptrace/breakpoint_site.hpp"
#include "ptrace/process_memory.hpp"
#include "ptrace/registers_x86_64.hpp"
#include "ptrace/site_table.hpp"
#include "ptrace/task_info.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::ptrace {

class task;

enum class stop_kind {
    breakpoint,       ///< tid trapped on the site at `address`; resume(tid) does the step-over
    thread_created,   ///< tid (parent, at its clone event) made `child` (at its first stop); both stopped
    thread_exiting,   ///< tid is at PTRACE_EVENT_EXIT, still readable; stopped
    thread_exited,    ///< tid is gone (reaped); nothing to resume
    exec,             ///< tid (now the leader) runs a new image; every other task and every site is gone; stopped.
                      ///< `child` is the TID the exec'ing thread had and `address` its old thread pointer
    process_exited,   ///< every task is gone; `status` is the leader's raw wait status
    call_returned,    ///< tid faulted at the call marker (set_call_marker): a remote call it ran is over; stopped
};

const char* stop_kind_name(stop_kind k);

struct stop_event {
    stop_kind kind;
    tid_t tid;
    tid_t child;            ///< thread_created: the new LWP
    target_addr address;    ///< breakpoint: the site
    int status = 0;         ///< process_exited / thread_exited: raw wait status
    std::uint64_t arg0 = 0; ///< breakpoint: the first argument register (rdi) at the trap
};

struct launch_options {
    std::vector<std::string> argv;                 ///< argv[0] is looked up in PATH
    std::vector<std::string> extra_env;            ///< "NAME=value", set in the child
};

class traced_process {
public:
    /// Seizes every task of `pid` (re-reading /proc/PID/task until a pass finds
    /// no new TID), then stops them all. Returns with every task stopped and
    /// held: call release_all() when set up. Throws tdctl::error with one
    /// actionable line: no such process, permission denied and why, kernel
    /// thread, the controller itself, already traced (and by whom).
    /// A task blocked in vfork() is not waited for: it cannot run until its
    /// child execs or exits, and stops before it does. When cancel_fd (e.g.
    /// the controller's signal fd) becomes readable, attach stops waiting,
    /// lets go of what it seized and throws tdctl::error (os, EINTR).
    static std::unique_ptr<traced_process> attach(pid_t pid, int cancel_fd = -1);

    /// Starts argv under trace and runs it to its entry point (AT_ENTRY), where
    /// the dynamic loader has mapped the libraries and no code of the program
    /// itself has run. Returns held, like attach(). Throws tdctl::error if the
    /// program cannot be started (the child's errno is reported).
    static std::unique_ptr<traced_process> launch(const launch_options& opts);

    ~traced_process();
    traced_process(const traced_process&) = delete;
    traced_process& operator=(const traced_process&) = delete;

    pid_t pid() const { return pid_; }
    bool was_launched() const { return launched_; }
    /// False once the process has exited, been detached or killed.
    bool is_alive() const { return !gone_; }
    bool is_detached() const { return detached_; }
    process_memory& memory() { return *memory_; }
    /// Every change to the target's memory, breakpoint bytes included, is
    /// recorded here before it is made (base/change_journal.hpp).
    change_journal& journal() { return *journal_; }

    std::vector<tid_t> tids() const;
    const task_info* find(tid_t tid) const;
    /// The registers a task had when it trapped on a site, while its stop
    /// there is being handled (no new PTRACE_GETREGS); std::nullopt otherwise.
    std::optional<registers> trap_registers(tid_t tid) const;

    /// Inserts (or adds a reason to) the site at addr; `function_size` (st_size
    /// of the function there, bytes) lets a one-byte `ret` use resume-in-place.
    /// Throws tdctl::error if the code cannot be read or written.
    const breakpoint_site& add_breakpoint(target_addr addr, std::uint64_t function_size);
    /// Inserts (or adds a reason to) a signal-stop site for the reporting
    /// function at addr (breakpoint_site's stop_flag). Stops of that signal
    /// are recognised once set_report_signal() named it.
    const breakpoint_site& add_signal_site(target_addr addr, stop_flag flag);
    /// The signal reporting code raises to stop for tdctl, the pc its
    /// signal-delivery-stop has (libtdagent.so's __tdagent_report_stopped),
    /// where r8 holds the reporting function and r9 its first argument, and
    /// the si_value (SI_QUEUE) that tells it from the same signal sent by
    /// anyone else. Such a stop is a hit of that function's site, resumed
    /// without the signal; one whose site is gone is dropped the same way.
    /// Signal 0 turns this off.
    void set_report_signal(int signo, target_addr stopped_pc, target_addr value)
    {
        sites_.set_report_signal({signo, stopped_pc, value});
    }
    /// The signal set_report_signal() named (0: none; cleared by an exec).
    int report_signal() const { return sites_.report_signal().signo; }
    /// Drops one reason; the last one removes the site. Must be called with
    /// every task stopped (hold) so no thread is between trap and report.
    void remove_breakpoint(target_addr addr);
    const breakpoint_site* site_at(target_addr addr) const;
    std::vector<const breakpoint_site*> sites() const;

    /// Next stop the owner must handle: queued ones first, then from the
    /// wait (waiter::wait_any: one blocking waitpid() per status) for at
    /// most timeout_ms (0: only a look; -1: no bound). std::nullopt when
    /// the bound passed, waiter::wake() ended the wait, or there is nothing
    /// to wait for: last_wait() says which.
    std::optional<stop_event> next_event(int timeout_ms);
    /// How the last next_event() ended (wait_end::status when it returned a stop).
    wait_end last_wait() const { return last_wait_; }
    bool has_queued_events() const { return !queue_.empty(); }

    /// The owner is done with tid's stop: restart it (deferred while held).
    void resume(tid_t tid);
    /// While every other task is held: restarts the stopped task tid alone
    /// until its next stop, or for at most timeout_ms, then interrupts it.
    /// Returns the stop its run made for the owner (a breakpoint, a clone,
    /// an exit; the owner handles it), std::nullopt when it stopped only for
    /// the interrupt or is gone. For a thread that must finish a few
    /// instructions before a detach (a creator between its clone and its push).
    std::optional<stop_event> run_alone(tid_t tid, int timeout_ms);

    /// Stops every running task and waits until all are stopped; nests.
    /// Stops that arrive meanwhile are queued for next_event().
    void stop_all();
    /// Undoes one stop_all(); at the outermost, restarts every stopped task the
    /// owner is not holding for an unhandled event.
    void release_all();
    /// Some hold (stop_all) is in force: every thread is stopped.
    bool is_holding() const { return hold_depth_ > 0; }

    /// For a hold that may last (a `stop` hit or an `interrupt` the user
    /// looks at): moves every task out of a SIGTRAP stop of ours
    /// (park_trap_stops), then puts every site's original bytes back through
    /// the journal (threads on a patch's `ret` are moved past it first),
    /// keeping the sites and their reasons. Were the tracer to die now, the
    /// threads it lets go would carry no SIGTRAP and meet no trap byte. Call
    /// with every task stopped.
    void withdraw_sites();
    /// Writes the withdrawn sites' patches again (journaled first); before
    /// the hold ends. Throws tdctl::error if the code cannot be written.
    void reinsert_withdrawn_sites();

    /// Puts back every site's bytes (finishing any thread's trap first) and
    /// detaches every task, leaving group-stopped tasks stopped.
    void detach();
    /// Says that detach() comes next (a caller that restores its own changes
    /// first): from here on a stop-all reads each stop with peek_stop()
    /// instead of a waitpid() (see peek_stops_).
    void begin_detach() { peek_stops_ = true; }
    /// SIGKILL the process and reap every task.
    void kill();

    /// For a launched process after detach(): wait for it to finish, at most
    /// timeout_ms (-1: no bound). Returns the raw wait status.
    std::optional<int> wait_launched_exit(int timeout_ms);

    /// After an exec event: runs the new image to its entry point (where the
    /// loader has mapped its libraries), queueing any other stop. Returns held.
    void run_to_entry();

    /// Runs a launched process (only its leader may run: before its program
    /// starts threads) until the leader reaches `where`, queueing any other
    /// stop. Returns with one hold more than before (release_all() undoes
    /// it), the leader's pc on `where` and no site left there. Throws
    /// tdctl::error naming `what` if the process exits first.
    void run_to(target_addr where, const char* what);

    // ---- remote calls (ptrace/remote_call.hpp)

    /// From now on a SIGSEGV stop of any task whose pc is `marker` (an
    /// address that can never be mapped: a remote call's return address) is
    /// reported as stop_kind::call_returned, the task left stopped, instead
    /// of the signal being passed on. A null marker ends that.
    void set_call_marker(target_addr marker) { call_marker_ = marker; }
    target_addr call_marker() const { return call_marker_; }
    /// Takes the signal a stopped task holds for its restart (0 if none), so
    /// that code run on its behalf does not receive it; give it back with
    /// restore_pending_signal() before the task resumes its own work.
    int take_pending_signal(tid_t tid);
    void restore_pending_signal(tid_t tid, int sig);
    /// Keeps a stopped task stopped across release_all() until resume(tid)
    /// (as if it had a stop the owner has not handled).
    void keep_stopped(tid_t tid);
    /// Moves a stopped task out of its signal-delivery-stop (a remote
    /// call's return, call_returned) into a PTRACE_EVENT_STOP at the same
    /// place, without running an instruction or delivering the signal: were
    /// the tracer to die now, the kernel would let it go with nothing
    /// pending. It stays stopped for the owner. False if it is gone or not
    /// stopped.
    bool park_signal_stop(tid_t tid);
    /// The task is in group-stop, exiting or in vfork(): it cannot run code for us.
    bool is_unfit_for_call(tid_t tid) const;

    /// Raw wait status of the leader once the process exited.
    std::optional<int> exit_status() const { return exit_status_; }

private:
    traced_process(pid_t pid, bool launched);

    // ---- tasks
    void seize(tid_t tid, bool is_leader);
    /// Seizes the launched child; on failure kills and reaps it and throws.
    void seize_launched();
    /// Passes the launched child's signals on until its exec event; throws
    /// tdctl::error (with the errno the child sent over err_read when its exec
    /// failed) if it exits first.
    void run_to_exec(const unique_fd& err_read, const std::string& program);
    /// A record for a task that is ours from now on, in `state`.
    task& add_task(tid_t tid, task_state state = task_state::running);
    task* find_task(tid_t tid);
    void forget_task(tid_t tid);
    /// The leader was reaped (raw_status): no task and no site is left.
    void mark_process_gone(int raw_status);

    // ---- the wait loop: one handler per kind of status
    /// The first queued stop, the task forgotten when it is gone.
    std::optional<stop_event> take_queued();
    std::optional<stop_event> handle_status(tid_t tid, wait_status ws);
    /// A status of a task we have no record of: a new clone early, or gone.
    void on_unknown_task(tid_t tid, wait_status ws);
    std::optional<stop_event> on_task_ended(tid_t tid, wait_status ws);
    std::optional<stop_event> on_signal_stop(task& t, int sig);
    void on_group_stop(task& t);
    /// PTRACE_EVENT_STOP with SIGTRAP: our interrupt (`interrupted`), or a
    /// LISTENing task going on.
    std::optional<stop_event> on_event_stop(task& t, bool interrupted);
    std::optional<stop_event> on_clone(task& parent);
    void on_fork(task& parent, bool is_vfork);
    std::optional<stop_event> on_exec(tid_t tid, wait_status ws);
    /// Marks the tasks a reported event leaves stopped (the reporter, a new
    /// thread) as the owner's to resume: hold/release does not touch them.
    void leave_to_owner(const stop_event& ev);
    std::optional<stop_event> on_breakpoint_trap(task& t);
    std::optional<stop_event> on_trap_before_interrupt(task& t);
    /// A stop of the report signal: true when it was one of ours (then `ev`
    /// holds the hit, or nothing when it is dropped); false for anyone else's.
    bool on_report_signal(task& t, std::optional<stop_event>& ev);
    void consume_owed_sigtrap(task& t);
    /// The next status of t, just restarted (waitpid by TID): a stop, or
    /// std::nullopt when t has gone (its end queued for the owner).
    std::optional<wait_status> next_stop_of(task& t);
    static bool has_queued_trap(tid_t tid);
    void note_vanished(task& t, wait_status ws);
    std::optional<wait_status> wait_first_stop(tid_t child);
    /// The clone flags of the clone(2), clone3(2) or vfork(2) a task is in
    /// (from its syscall number and first argument); std::nullopt for any
    /// other call, or when clone3's clone_args cannot be read.
    std::optional<std::uint64_t> read_clone_flags(long syscall_number, std::uint64_t arg0);
    /// Whether task_id is a task of the target's thread group now (tgkill
    /// with signal 0): how a clone event's child is told from a new process.
    bool is_in_thread_group(tid_t task_id) const;
    /// Detaches a new process (fork, vfork, clone without CLONE_THREAD); one
    /// with its own copy of our memory gets the original bytes back first.
    void let_go_new_process(tid_t child, bool has_own_memory);
    /// The new task's TID from the parent's clone/fork event stop
    /// (PTRACE_GETEVENTMSG); std::nullopt when a SIGKILL took the parent out
    /// of that stop (then it is marked running: its exit comes next).
    std::optional<tid_t> read_new_tid(task& parent);
    /// Whether task `other` uses the target's address space (kcmp(2)
    /// KCMP_VM); false when that cannot be told.
    bool shares_memory_with_target(tid_t other) const;
    /// Lets go of every early-stopped task that is not a thread of the
    /// target (/proc/TID/status Tgid). Only once a parent's event was lost
    /// (parent_events_lost_): it costs a file read per early stop.
    void let_go_orphan_processes();

    // ---- run control
    void restart(task& t);
    /// Restarts t unless a hold is on or the owner has yet to handle its stop.
    void restart_if_free(task& t);
    /// Moves t, trapped on its hit's site, past the site as its step-over kind says.
    void step_over(task& t);
    void step_over_single(task& t, breakpoint_site& site);
    /// Single-steps t once (the site's bytes lifted), keeping any signal that
    /// comes first for t's restart.
    void single_step_once(task& t);
    /// Performs the `ret` t trapped on (the emulated return).
    void return_from_trap(task& t);
    void finish_step_over(task& t);
    void clear_threads_from(const breakpoint_site& site);
    /// Interrupts every running task and waits until each has stopped (the
    /// body of stop_all(), without taking a hold).
    void stop_running();
    /// Takes, by TID, the status of each task in `pending` that has one and
    /// handles it; drops from `pending` the tasks that are stopped, ending,
    /// in vfork() or gone. Never blocks.
    void take_stops_of(std::vector<tid_t>& pending);
    /// Throws tdctl::error (target): `pending` did not stop in time.
    [[noreturn]] void throw_stuck(const std::vector<tid_t>& pending) const;
    /// Marks the running tasks that are blocked in vfork() (from
    /// /proc/PID/task/TID/syscall) as held.
    void mark_vfork_blocked();
    /// Throws tdctl::error (os, EINTR) when cancel_fd_ is readable.
    void throw_if_cancelled() const;
    /// Moves every stopped task whose stop carries a SIGTRAP of ours (see
    /// task_state::trap_stopped) into a PTRACE_EVENT_STOP, its hit's step-over done
    /// first; a task on a single-step site stays. Called by withdraw_sites(),
    /// so a target held for long has no such stop (a `stop`'s reporter
    /// included).
    void park_trap_stops();
    void park(task& t);

    // ---- detach
    /// Lets every thread off the sites, then puts every site's bytes back.
    void remove_all_sites();
    /// Reaps the `dying` tasks and detaches the `in_vfork` ones once they stop,
    /// for at most about a second; what is left stays in the vectors.
    void finish_detach(std::vector<tid_t>& dying, std::vector<tid_t>& in_vfork);

    pid_t pid_;
    bool launched_;
    bool gone_ = false;
    bool detached_ = false;
    /// Set by begin_detach() and detach(): stop-alls read stops with
    /// peek_stop(), whose statuses the kernel keeps until the threads are
    /// resumed. Every thread is detached soon after, so no waitpid() takes
    /// most of them; a stop-all of a session that goes on would leave T of
    /// them for the wait loop's waitpid(-1), each call walking every traced
    /// task (measured: attach + detach of 4,000 threads 4.4x slower).
    bool peek_stops_ = false;
    std::optional<int> exit_status_;
    std::unique_ptr<waiter> waiter_;
    std::unique_ptr<process_memory> memory_;
    std::unique_ptr<change_journal> journal_;   // after memory_: goes first, restoring through it
    std::map<tid_t, std::unique_ptr<task>> tasks_;
    std::unordered_map<tid_t, wait_status> early_stops_;   // new clones whose first stop beat the parent's event
    site_table sites_;
    std::deque<stop_event> queue_;
    wait_end last_wait_ = wait_end::status;
    // A clone/fork event was lost to a SIGKILL of its parent: new tasks met
    // early may be processes nobody will claim.
    bool parent_events_lost_ = false;
    int hold_depth_ = 0;
    int cancel_fd_ = -1;   // readable: give up waiting (attach only)
    target_addr run_to_reached_;  // where the last run_to() stopped the leader
    target_addr call_marker_;     // a remote call's return address; null when none runs
};

}  // namespace tdctl::ptrace
