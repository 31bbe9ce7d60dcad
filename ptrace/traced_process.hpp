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

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include <sys/types.h>

#include "base/types.hpp"
#include "base/unique_fd.hpp"
#include "ptrace/breakpoint_site.hpp"
#include "ptrace/birth_tracing.hpp"
#include "ptrace/breakpoints.hpp"
#include "ptrace/process_memory.hpp"
#include "ptrace/registers_x86_64.hpp"
#include "ptrace/seize.hpp"
#include "ptrace/sigtrap_guard.hpp"
#include "ptrace/terminal_interrupts.hpp"
#include "ptrace/site_table.hpp"
#include "ptrace/stop_event.hpp"
#include "ptrace/stop_router.hpp"
#include "ptrace/task_births.hpp"
#include "ptrace/task_table.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::ptrace {

class stepper;
class task_stopper;

class traced_process final : private stop_router {
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

    std::vector<tid_t> tids() const { return tasks_.tids(); }
    const task_info* find(tid_t tid) const { return tasks_.find(tid); }
    /// Each task's record; also what can be asked of or done to one record
    /// (its registers at a trap, its pending signal; task_table.hpp).
    task_table& tasks() { return tasks_; }
    const task_table& tasks() const { return tasks_; }

    /// The breakpoints the owner plants (ptrace/breakpoints.hpp); once the
    /// process is ours (attach() and launch() return it so).
    ptrace::breakpoints& sites() { return *breakpoints_; }
    const ptrace::breakpoints& sites() const { return *breakpoints_; }

    /// Whether threads born from now on are traced (ptrace/birth_tracing.hpp):
    /// while they are not, stop_all() also seizes and stops the strangers.
    birth_tracing& new_threads() { return new_threads_; }

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
    /// the interrupt or is gone; a stop met after the interrupt (an exec's,
    /// say) is queued for next_event(). For a thread that must finish a few
    /// instructions before a detach (a creator between its clone and its push).
    std::optional<stop_event> run_alone(tid_t tid, int timeout_ms);

    /// Stops every running task and waits until all are stopped; nests.
    /// Stops that arrive meanwhile are queued for next_event().
    void stop_all() override;
    /// Undoes one stop_all(); at the outermost, restarts every stopped task the
    /// owner is not holding for an unhandled event.
    void release_all() override;
    /// Some hold (stop_all) is in force: every thread is stopped.
    bool is_holding() const override { return hold_depth_ > 0; }


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
    /// timeout_ms (-1: no bound). Returns the raw wait status. A thread the
    /// detach could not let go (woken from its stop by a group exit's
    /// SIGKILL, say) is let go at the stop it makes meanwhile.
    std::optional<int> wait_launched_exit(int timeout_ms);

    /// Runs a launched process (only its leader may run: before its program
    /// starts threads) until the leader reaches `where`, queueing any other
    /// stop. Returns true with one hold more than before (release_all()
    /// undoes it), the leader's pc on `where` and no site left there; false,
    /// with no site left and no hold more, when the process dies first (a
    /// fatal signal, an exit): the leader's exit stop or the process's end
    /// is then queued for the owner (next_event), who lets it die.
    [[nodiscard]] bool run_to(target_addr where);

    // ---- remote calls (ptrace/remote_call.hpp)

    /// From now on a SIGSEGV stop of any task whose pc is `marker` (an
    /// address that can never be mapped: a remote call's return address) is
    /// reported as stop_kind::call_returned, the task left stopped, instead
    /// of the signal being passed on. A null marker ends that.
    void set_call_marker(target_addr marker) { call_marker_ = marker; }
    /// Moves a stopped task out of its signal-delivery-stop (a remote
    /// call's return, call_returned) into a PTRACE_EVENT_STOP at the same
    /// place, without running an instruction or delivering the signal: were
    /// the tracer to die now, the kernel would let it go with nothing
    /// pending. It stays stopped for the owner. False if it is gone or not
    /// stopped.
    bool park_signal_stop(tid_t tid);

    /// Raw wait status of the leader once the process exited.
    std::optional<int> exit_status() const { return exit_status_; }

private:
    traced_process(pid_t pid, bool launched, std::unique_ptr<waiter> wait);
    /// Opens the target's memory, with the journal and the parts that
    /// write through it; once the process is ours (seized, or past exec).
    void open_memory();
    /// The leader was reaped (raw_status): no task and no site is left.
    void mark_process_gone(int raw_status);

    // ---- the wait loop: one handler per kind of status
    /// The first queued stop, the task forgotten when it is gone.
    std::optional<stop_event> take_queued();
    std::optional<stop_event> handle_status(tid_t tid, wait_status ws);
    void route(tid_t tid, wait_status ws) override;
    std::optional<stop_event> on_signal_stop(task& t, int sig);
    /// PTRACE_EVENT_STOP with SIGTRAP: our interrupt (`interrupted`), or a
    /// LISTENing task going on.
    std::optional<stop_event> on_event_stop(task& t, bool interrupted);
    std::optional<stop_event> on_clone(task& parent);
    std::optional<stop_event> on_exec(tid_t tid, wait_status ws);
    /// Marks the tasks a reported event leaves stopped (the reporter, a new
    /// thread) as the owner's to resume: hold/release does not touch them.
    void leave_to_owner(const stop_event& ev);

    // ---- run control
    void restart(task& t);
    /// Restarts t unless a hold is on or the owner has yet to handle its stop.
    void restart_if_free(task& t);

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
    task_table tasks_;
    site_table sites_;
    task_births births_;
    birth_tracing new_threads_;  // after tasks_ and births_
    sigtrap_guard sigtrap_guard_;
    terminal_interrupts terminal_interrupts_;  // launched under a prompt: a Ctrl-C is tdctl's
    std::deque<stop_event> queue_;
    std::unique_ptr<stepper> stepper_;        // with memory_ (open_memory)
    std::unique_ptr<task_stopper> stopper_;   // with memory_ (open_memory)
    std::unique_ptr<ptrace::breakpoints> breakpoints_;  // with memory_ (open_memory)
    wait_end last_wait_ = wait_end::status;
    int hold_depth_ = 0;
    int cancel_fd_ = -1;   // readable: give up waiting (attach only)
    target_addr run_to_reached_;  // where the last run_to() stopped the leader
    target_addr call_marker_;     // a remote call's return address; null when none runs
};

/// After the exec event of a launch or of a running target: runs the new
/// image to its entry point (AT_ENTRY from /proc/PID/auxv), where the
/// loader has mapped its libraries and no code of the program has run;
/// other stops are queued. Returns true with one hold more
/// (release_all()), false when the process dies first (traced_process::
/// run_to). Throws tdctl::error (target) if there is no AT_ENTRY.
[[nodiscard]] bool run_to_entry(traced_process& process);

}  // namespace tdctl::ptrace
