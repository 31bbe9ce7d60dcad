// A session: one traced target, its modules, its thread agent, and what the
// controller has changed in it. It routes each stop to its handler (a drained
// event message, a new thread to enable, an exec to re-resolve) and, on
// detach, writes back every mask and flag it changed and removes every
// breakpoint, so the target's text and data are as they were.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "base/unique_fd.hpp"
#include "core/agent_loader.hpp"
#include "core/backtrace.hpp"
#include "core/call_site.hpp"
#include "core/event_watch.hpp"
#include "core/got_routing.hpp"
#include "core/late_routing.hpp"
#include "core/lwp_usage.hpp"
#include "core/settings_restore.hpp"
#include "core/stats_collector.hpp"
#include "core/target_access.hpp"
#include "core/thread_agent.hpp"
#include "core/thread_backend.hpp"
#include "core/thread_handle.hpp"
#include "core/usage_window.hpp"
#include "events/event_message.hpp"
#include "ptrace/task_files.hpp"
#include "ptrace/traced_process.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::core {

/// Something a user should see, produced while the session runs the target.
struct session_event {
    enum class kind {
        message,           ///< an event message drained at a reporting address
        stopped_at_event,  ///< a `stop` breakpoint was hit; the target is held (message.event, message.reporter)
        process_exited,    ///< the target is gone; `status` is the raw wait status
        exec,              ///< the target exec'd; symbols and the thread agent were re-resolved
        routing,           ///< a module loaded or unloaded after an attach with the agent (`note`)
    };
    kind what = kind::message;
    events::event_message message;
    int status = 0;
    routing_note note;     ///< kind::routing
};

/// td_ta_get_stats for one target (seed 000, SPEC §6).
struct thread_stats {
    td_ta_stats_t td{};            ///< the int fractions, halved together until they fit
    stat_averages averages;        ///< the unreduced 64-bit parts and the doubles
    std::string nthreads_source;   ///< "__nptl_nthreads" (the thread library's counter) or "/proc"
    std::string r_concurrency_source;  ///< symbol read, or "" when unavailable (r_concurrency 0)
    bool enabled = false;
};

class session final : public target_access {
public:
    /// Attaches to a running process (SPEC §4). Throws tdctl::error with one
    /// actionable line when the attach cannot be done, or (os, EINTR) when
    /// cancel_fd became readable meanwhile (everything seized is let go).
    /// Without `with_agent`, a libtdagent.so the target dlopen()ed is passed
    /// by (it sees none of the calls: nptl serves); one preloaded or linked
    /// serves as at launch. With `with_agent`, one the target dlopen()ed is
    /// considered too; load_agent() then loads it if needed and routes the
    /// modules' calls to it.
    static std::unique_ptr<session> attach(pid_t pid, int cancel_fd = -1, bool with_agent = false);
    /// Launches argv stopped at its entry point.
    static std::unique_ptr<session> launch(const ptrace::launch_options& opts);

    /// Detaches (restoring everything) unless the target is gone or killed.
    ~session() override;

    // target_access
    pid_t pid() const override { return process_->pid(); }
    target_memory& memory() override { return process_->memory(); }
    std::optional<symbols::symbol> lookup_symbol(std::string_view module, std::string_view name) override;
    bool has_module(std::string_view module) override;
    std::string module_problem(std::string_view module) override;
    std::vector<tid_t> lwps() override;
    std::optional<target_addr> thread_pointer(tid_t lwp) override;
    /// Through NSpid (/proc/PID/task/TID/status), cached per LWP, when the
    /// target is in another PID namespace; the identity otherwise.
    std::optional<pid_t> ns_tid_of(tid_t lwp) override;
    std::optional<tid_t> lwp_of_ns_tid(pid_t ns_tid) override;

    /// The target's PID in its own PID namespace when that is not tdctl's
    /// (a container; from NSpid in /proc/PID/status), else std::nullopt.
    std::optional<pid_t> ns_pid() const { return ns_pid_; }
    /// An LWP's TID in the target's PID namespace when that is not tdctl's
    /// (shown beside the LWP), else std::nullopt; also when the LWP is gone.
    std::optional<pid_t> foreign_ns_tid(tid_t lwp)
    {
        return ns_pid_ && lwp.value != 0 ? ns_tid_of(lwp) : std::nullopt;
    }

    ptrace::traced_process& process() { return *process_; }

    /// Loads libtdagent.so into the attached process (core/agent_loader.hpp),
    /// or finds the same version already there, and re-reads the modules:
    /// afterwards the session is as after an attach to a process that had
    /// the agent loaded (the tdagent backend), and the calls of the modules
    /// loaded before it are routed to it through their GOT slots
    /// (core/got_routing.hpp, journaled); with `follow_loads`, so are those
    /// of modules the process loads while attached (core/late_routing.hpp:
    /// the loader is followed with a trap byte at r_brk until detach, which
    /// a SIGKILL of tdctl can leave behind). Call right after attach(),
    /// every thread still stopped; returns so. Throws tdctl::error (target)
    /// with the reason on a refusal or failure (nothing left in the
    /// target), (os, EINTR) when cancel_fd became readable first.
    agent_load_report load_agent(const agent_file& agent, int cancel_fd = -1, bool follow_loads = false);
    const symbols::module_set& modules() const { return modules_; }
    /// The module set that holds code address `a`: the session's, or, for
    /// a module mapped after it was loaded (a dlopen), a set read again
    /// from /proc/PID/maps (at most once a second, only when an address
    /// falls outside every known module). nullptr when no module holds a
    /// (anonymous code, or a load younger than a second).
    const symbols::module_set* modules_holding(target_addr a);

    /// The thread agent, or nullptr when the target has no thread library
    /// publishing the protocol; no_agent_reason() then says what was missing.
    thread_agent* agent() { return agent_.get(); }
    const std::string& no_agent_reason() const { return no_agent_reason_; }
    /// What the attach with the agent routed to it (GOT slots, journaled);
    /// std::nullopt without one.
    const std::optional<routing_tally>& routing() const { return routing_; }

    /// The thread's name (comm) from /proc/PID/task/TID/comm; "" when gone.
    std::string thread_name(tid_t lwp) const;
    /// thread_name() of many LWPs at once (result[i] is lwps[i]'s), the
    /// /proc reads spread over a few threads on a large process.
    std::vector<std::string> thread_names(const std::vector<tid_t>& lwps) const;
    /// When the LWP started, clock ticks since boot (/proc/PID/task/TID/stat
    /// field 22); std::nullopt when gone.
    std::optional<std::uint64_t> lwp_start_ticks(tid_t lwp) const;

    // ---- call stacks (one unwinder for the session: core/backtrace.hpp)

    /// The call stack of `lwp`, innermost first, at most `max_frames`. The LWP
    /// must be stopped: held, or its stop being handled. An LWP at an event
    /// reporting site (trapped there, or held after tdctl performed the
    /// reporting function's `ret`) has that function as frame 0, then its
    /// caller. Reads registers (the trap's when known) and memory only.
    /// Error: a line for people (the LWP is gone or exiting, no modules).
    std::expected<std::vector<stack_frame>, std::string> stack_of(tid_t lwp, int max_frames = 64);
    /// `watch --bt`: each message drained from now on carries the reporting
    /// thread's stack (event_message::frames), at most `depth` frames; 0: none.
    /// `only`: just the messages of these events carry one (empty: all).
    void set_event_stacks(int depth, std::vector<td_event_e> only = {})
    {
        event_stack_depth_ = depth;
        stack_events_ = std::move(only);
    }
    int event_stacks() const { return event_stack_depth_; }
    /// `locks`: each TD_SLEEP drained from now on carries the kind and owner
    /// of the object slept on when it is a lock (event_message::lock,
    /// lock_owner), read while the reporter is still stopped
    /// (core/lock_probe.hpp). The kind comes from the message's stack
    /// (set_event_stacks, TD_SLEEP among its events); while probes are on,
    /// only the TD_SLEEP that follows a TD_LOCK_TRY of the same LWP on the
    /// same object gets a stack (not a join's, a condition variable's...),
    /// and that stack starts at the program's call: the frames of the
    /// reporting module (libtdagent.so) are dropped from its top.
    void set_lock_probes(bool on)
    {
        lock_probes_ = on;
        lock_tries_.clear();
    }
    /// The LWP that runs a handle's thread (thread_handle::lwp), 0 when none
    /// does or it is unknown.
    tid_t lwp_of(target_addr handle);

    // ---- changes to the target, journaled so detach can undo them

    /// td_ta_set_event / td_ta_clear_event, remembering the mask found first.
    td_status ta_set_event(const td_thr_events_t& events);
    td_status ta_clear_event(const td_thr_events_t& events);
    /// td_thr_set_event / td_thr_clear_event / td_thr_event_enable on one
    /// thread, remembering the thread's mask and flag found first.
    td_status thr_set_event(const thread_handle& th, const td_thr_events_t& events);
    td_status thr_clear_event(const thread_handle& th, const td_thr_events_t& events);
    td_status thr_event_enable(const thread_handle& th, bool on);

    // ---- watching: drain every message of the armed events as it happens

    /// Plants breakpoints at the events' reporting addresses, adds them to the
    /// global mask and enables reporting on every thread, and on every new one
    /// as it is born. TD_NOLIBTHREAD without an agent; TD_NOEVENT if an event
    /// has no reporting address.
    td_status arm(const std::vector<td_event_e>& events);
    /// Undoes arm(): breakpoints out, global mask and enable flags back to what
    /// they were before arm(). Messages still in flight are drained, not shown.
    void disarm();
    bool is_armed() const { return armed_.has_value(); }
    const std::vector<td_event_e>& armed_events() const;

    // ---- stopping at events (the seed's flow by hand)

    /// Plants breakpoints only; the next hit holds the whole target and yields
    /// a stopped_at_event. TD_NOEVENT if an event has no reporting address.
    td_status plant_stops(const std::vector<td_event_e>& events);
    /// Removes the `stop` breakpoints (target held meanwhile).
    void clear_stops();
    bool has_stops() const { return !stop_events_.empty(); }

    /// Runs the target for at most timeout_ms, handling every stop; returns
    /// what a user should see (maybe nothing). 0 polls.
    std::vector<session_event> pump(int timeout_ms);
    /// The same, waiting as cheaply as the kernel allows: one blocking
    /// waitpid() per status (traced_process::next_event_blocking) until a
    /// stop gives something a user should see or `attention` ends the wait
    /// (another thread set it, then called ptrace::waiter::wake_blocked_wait()).
    /// Returns at once with what is queued. `no_child`: there was nothing to
    /// wait for (the caller should sleep some other way).
    std::vector<session_event> pump_blocking(const std::atomic<bool>& attention, bool& no_child);

    /// Holds every LWP stopped (the `interrupt` command, and around edits that
    /// must not race the target, such as unlinking from the message list).
    void interrupt();
    /// Releases what interrupt() or a stopped_at_event held; a thread stopped
    /// at a `stop` breakpoint steps over it. The `stop` breakpoints go.
    void resume();
    bool is_held() const { return held_; }

    // ---- one stop round for commands that follow each other at once

    /// Lets the target run if its threads are still stopped only because
    /// tdctl has not let go of them since the attach or the last command's
    /// hold (never a hold the user asked for). Callers: before a command that
    /// needs the target running, and before tdctl waits for input.
    void release_lingering();
    /// Whether the hold a command ends may linger: true while another
    /// command follows at once (batch lines), so consecutive commands (and an
    /// attach, and a detach) share one stop of every thread.
    void set_hold_may_linger(bool may) { hold_may_linger_ = may; }
    /// Ends one command's hold (cmd::target_hold): resume(), or, when
    /// set_hold_may_linger(true), leaves the threads stopped for the next
    /// command.
    void end_command_hold();
    /// Threads are stopped only because tdctl has not let go of them yet.
    bool is_lingering() const { return lingering_; }

    // ---- statistics (core/td_ta_enable_stats.cpp, td_ta_reset_stats.cpp, td_ta_get_stats.cpp)

    /// On: reset and start gathering; off: freeze the averages. Works with or
    /// without a thread library.
    td_status enable_stats(bool on);
    td_status reset_stats();
    /// nthreads and r_concurrency are read live; the averages as gathered.
    td_result<thread_stats> get_stats();

    // ---- per-LWP resource usage (pthread_getrusage_np from outside) and times

    /// PTHRDSINFO_RUSAGE_START / _STOP.
    void rusage_start() { rusage_enabled_ = true; }
    void rusage_stop() { rusage_enabled_ = false; }
    bool rusage_enabled() const { return rusage_enabled_; }
    /// PTHRDSINFO_RUSAGE_COLLECT: ENOSYS before rusage_start(), ESRCH for an
    /// LWP that is not in the target.
    std::expected<struct rusage, int> rusage_collect(tid_t lwp);
    /// The same with the LWP's name; `maxrss_kb` saves re-reading VmHWM per
    /// row when collecting every LWP.
    std::expected<lwp_rusage_row, int> rusage_collect_row(tid_t lwp, std::optional<long> maxrss_kb);
    /// rusage_collect_row() of many LWPs at once (result[i] is lwps[i]'s;
    /// all ENOSYS when collection is not started), the /proc reads spread
    /// over a few threads on a large process.
    std::vector<std::expected<lwp_rusage_row, int>> rusage_collect_rows(const std::vector<tid_t>& lwps,
                                                                        long maxrss_kb);
    /// _lwp_info for any LWP of the target: ESRCH when it is not one.
    std::expected<lwp_times, int> lwp_info(tid_t lwp);
    std::expected<lwp_times_row, int> lwp_info_row(tid_t lwp);
    /// lwp_info_row() of many LWPs at once (result[i] is lwps[i]'s).
    std::vector<std::expected<lwp_times_row, int>> lwp_info_rows(const std::vector<tid_t>& lwps);

    // ---- per-LWP usage over a window (`top`; the split at the end of `watch` and `sleep`)

    /// Opens a usage window now (one at a time: an open one is replaced).
    /// While it is open, each birth, exit stop and exec is accounted in it.
    /// `named_rows`: see usage_window's constructor.
    void open_usage_window(counter_depth depth, std::size_t named_rows = usage_window::all_named);
    /// Every LWP's share since the window opened or was last taken (those
    /// that ended included); the next window starts now. Empty when no
    /// window is open.
    window_usage take_usage_window();
    void close_usage_window() { usage_.reset(); }

    /// Restores the target (journal), removes breakpoints, detaches.
    void detach();
    /// Kills the target.
    void kill();
    bool is_alive() const { return process_->is_alive() && !process_->is_detached(); }
    /// Stops already collected but not yet handed out by pump(), or statuses
    /// not looked for since the last one was taken: a caller must pump again
    /// before it sleeps on wait_fd(), which does not signal them.
    bool has_pending() const { return is_alive() && process_->may_have_events(); }

    /// For poll(): readable when the target may have a stop to handle.
    int wait_fd() const { return process_->wait_fd(); }

private:
    explicit session(std::unique_ptr<ptrace::traced_process> process);
    /// Reads the target's modules and finds its thread library. `early`, a
    /// set read before the attach, is taken instead of reading them again
    /// when the target's file mappings are still the same.
    void load_symbols(std::optional<symbols::module_set> early = std::nullopt);
    /// Launch through an explicitly named loader: runs it from one
    /// _dl_debug_state notification to the next until a thread library is
    /// mapped (at most max_loader_notifications). Returns held.
    void follow_loader();
    static constexpr int max_loader_notifications = 64;
    void handle(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent);
    void on_breakpoint(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent);
    /// A stop at a reporting address while watching: the corridor takes the
    /// message; it is shown when its event was asked for.
    void on_watched_report(td_event_e event, const ptrace::stop_event& ev, std::vector<session_event>& out,
                           bool silent);
    /// A stop at a `stop` breakpoint: the whole target is held.
    void hold_at_stop(td_event_e event, const ptrace::stop_event& ev, std::vector<session_event>& out);
    /// Where the creator stopped at a TD_CREATE report was called from
    /// (core/call_site.hpp); null when unknown. The creator is still stopped.
    target_addr call_site_of(const ptrace::stop_event& ev);
    /// call_site_of() from the creator's stack read with the report (`stack`: from sp up).
    target_addr call_site_from(const ptrace::stop_event& ev, const ptrace::registers& regs,
                               std::span<const std::byte> stack);
    void on_thread_created(const ptrace::stop_event& ev);
    /// A new thread of the library, born at a clone stop while watching, is
    /// enabled; false when its record was not found (not a thread of the library).
    bool enable_born_at_clone(tid_t child);
    /// Whether every pthread_create `creator` starts from now on reports
    /// TD_CREATE: TD_CREATE is in the global mask and the creator's flag on
    /// since the last change of either (report_epoch_). Then a new thread is
    /// enabled at its creator's report, in the consume's own write, instead
    /// of at the clone stop (two system calls fewer per thread).
    bool creates_are_reported_by(tid_t creator) const;
    /// Whether the watch enables new threads at their creator's report.
    bool births_enable_at_report() const;
    /// Enables, the clone stop's way, every new thread left to a report that
    /// will not come (`creator`'s, or any when invalid): the creator goes on
    /// without the site (withdrawn, removed, not watched).
    void enable_pending_births(tid_t creator = tid_t{});
    /// The creator's own reporting is on (a `stop` then enables what it creates).
    bool creator_reports(tid_t creator);
    void inherit_journal(tid_t parent, tid_t child);
    void on_thread_exiting(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent);
    void on_exec(const ptrace::stop_event& ev, std::vector<session_event>& out);
    /// Forgets everything tied to the image an exec replaced; returns the
    /// events that were armed.
    std::vector<td_event_e> forget_image();
    /// Arms again, after an exec, those of `events` the new image reports.
    void rearm_after_exec(const std::vector<td_event_e>& events);
    bool is_death_armed() const;
    /// The thread handle of an LWP (thread_backend::handle_of).
    std::optional<target_addr> handle_of(tid_t lwp);
    void enable_thread_for_watch(target_addr handle, std::optional<std::int32_t> record_tid = {});
    /// enable_thread_for_watch() for a thread that has not run yet: no
    /// creator's reporting changes (report_epoch_ stays).
    void enable_newborn(target_addr handle, std::int32_t record_tid);
    /// A mask or flag is about to be written (the change journal records
    /// it): a later detach lets late reports settle.
    void will_write_settings();
    /// Sets the global mask, enables every thread and the initial flag for arm().
    td_status enable_for_arm(const std::vector<td_event_e>& planted);
    /// Writes back the global mask, the initial-report flag and every
    /// touched record's enable flag and mask (settings_restore); the sites stay.
    void restore_settings();
    /// With the settings back and the sites still planted, lets the threads
    /// run for settle_seconds (released first if held), taking (silently)
    /// each message a thread that had already decided to report pushes late;
    /// returns with all held.
    void settle_reports();
    /// Runs each creator seen at a clone stop while settling, and not at a
    /// site since, alone until it stops again (its push taken at the site).
    void let_creators_push();
    /// Consumes every listed message that was not listed at attach, when the
    /// journal held changes (those messages exist because of them).
    void consume_our_messages();
    void drain_queued_silently();
    td_status plant(const std::vector<td_event_e>& events);
    /// The signal the agent raises to stop at a report (chosen on first use:
    /// SIGURG, SIGWINCH or SIGCHLD, whichever the target does not catch), or
    /// 0 when its sites take trap bytes (nptl, an agent without stop flags,
    /// a target catching all three).
    int report_signal();
    void remove_sites(const std::vector<td_event_e>& events);

    std::unique_ptr<ptrace::traced_process> process_;
    // The target's PID namespace, when not ours: record TIDs are its own
    // (gettid() inside it), mapped to and from our LWPs through NSpid.
    std::optional<pid_t> ns_pid_;
    std::unordered_map<tid_t, pid_t> ns_tid_by_lwp_;
    std::unordered_map<pid_t, tid_t> lwp_by_ns_tid_;
    void forget_ns_tid(tid_t lwp);
    symbols::module_set modules_;
    // Modules read again for an address outside modules_ (modules_holding),
    // and when, s on seconds_since_start(); reset with modules_.
    std::optional<symbols::module_set> late_modules_;
    double late_modules_at_ = -1;
    // Attached without --agent: a libtdagent.so that does not interpose is
    // not the thread library (load_symbols).
    bool passes_by_late_agent_ = false;
    std::optional<routing_tally> routing_;
    /// Routes the modules' calls to the agent for an attach with --agent,
    /// then, with `follow_loads`, follows the loader to route the modules
    /// loaded later; throws tdctl::error (target) when the agent is not there.
    void route_calls_to_agent(bool follow_loads);
    // Following the loader for modules loaded after an attach with --agent
    // (core/late_routing.hpp); null otherwise.
    std::unique_ptr<late_routing> late_;
    /// Stops following the loader (its breakpoints out; every thread stopped).
    void stop_late_routing();
    std::unique_ptr<thread_agent> agent_;
    std::string no_agent_reason_;
    // With agent_ (load_symbols), and gone with it: what differs between the
    // thread libraries (the agent's own, thread_agent::seam), which value
    // each restore of their settings puts back, and the corridor that turns
    // a reporting stop into a message.
    thread_backend* backend_ = nullptr;
    std::optional<settings_restore> settings_;
    std::unique_ptr<event_watch> watch_;

    // Reporting address -> event, for every site planted by arm() or plant_stops().
    std::unordered_map<target_addr, td_event_e> site_events_;

    struct armed_state {
        std::vector<td_event_e> events;
        // A library that tells a new thread only through TD_CREATE
        // (thread_backend::must_follow_create): when watching other events,
        // create is armed too, to enable each new thread at its report, but
        // not shown.
        bool follow_create = false;
    };
    std::optional<armed_state> armed_;
    // The longest one pump() call goes on taking stops, s.
    static constexpr double pump_budget_seconds = 0.02;
    // A mask or flag was written since the last settle_reports(): a thread
    // may have decided to report and not pushed yet.
    bool reports_may_be_pending_ = false;
    // While settle_reports() runs: no thread is newly enabled.
    bool settling_ = false;
    // How long settle_reports() lets late reporters run, s: far longer than
    // the few hundred instructions and one clone() between glibc's decision
    // to report and its push, bounded so a detach stays quick.
    static constexpr double settle_seconds = 0.02;
    // ... and until each runnable thread has had this much CPU, ns (the push
    // is at most a clone() and a few hundred instructions away) ...
    static constexpr std::uint64_t settle_cpu_ns = 200000;
    // ... but never longer than this, s (0.5 s ran out in 7 of 100 detaches
    // on a storm with two CPUs and a load of ~20: a glibc list entry left).
    static constexpr double settle_max_seconds = 2.0;
    // Creators seen at a clone stop while settling and not at a site since
    // (TIDs), and how long each may run alone to its push, ms, in at most
    // so many rounds (a creator may clone again meanwhile).
    std::unordered_set<pid_t> mid_create_;
    // Bumped by every change of a mask or flag but a new thread's own
    // enabling; a creator is known to report TD_CREATE (creates_are_reported_by)
    // from its second clone stop in an epoch, or from birth when enabled
    // before it ran: its first clone may come from a pthread_create that
    // decided before the change.
    std::uint64_t report_epoch_ = 1;
    std::unordered_map<tid_t, std::uint64_t> reporting_since_;
    // New threads (LWP -> creator) whose enabling rides on their creator's
    // TD_CREATE report.
    std::unordered_map<tid_t, tid_t> births_at_report_;
    // The creator's stack from sp, read with the TD_CREATE report for its call site.
    std::array<std::byte, call_site_reader::stack_window> report_stack_{};
    static constexpr int creator_run_ms = 20;
    static constexpr int max_creator_rounds = 3;
    // restore_settings() found changes: listed messages are ours to consume.
    bool messages_are_ours_ = false;
    std::vector<td_event_e> stop_events_;
    bool held_ = false;
    // Stopped, not held: the attach's or the last command's stop of every
    // thread, kept for the command that follows at once (release_lingering).
    bool lingering_ = false;
    bool hold_may_linger_ = false;
    tid_t stopped_reporter_;
    // /proc/PID/task/TID files kept open: names per event, schedstat per
    // sample, rusage rows (ptrace/task_files.hpp).
    mutable procfs::task_files files_;
    stats_collector stats_;
    std::optional<usage_window> usage_;
    // Told of each LWP's birth, exit stop, disappearance and exec: the
    // statistics, and the usage window while one is open (else nullptr).
    std::array<lwp_lifecycle*, 2> accounting() { return {&stats_, usage_ ? &*usage_ : nullptr}; }
    bool rusage_enabled_ = false;
    // Call sites of TD_CREATE reports (made at the first one; dropped at exec).
    std::unique_ptr<call_site_reader> call_sites_;

    // Made at the first stack_of(), dropped with the image (load_symbols).
    std::unique_ptr<unwinder> unwinder_;
    int event_stack_depth_ = 0;
    std::vector<td_event_e> stack_events_;  // empty: every event
    bool lock_probes_ = false;
    // Lock probes: each LWP's last TD_LOCK_TRY object, until its TD_SLEEP.
    std::unordered_map<pid_t, std::uint64_t> lock_tries_;
    /// Lock probes on: whether `msg` is a lock wait's TD_SLEEP (noting each
    /// TD_LOCK_TRY on the way); true for every message when they are off.
    bool wants_lock_stack(const events::event_message& msg);
    /// The lock's kind and owner on a lock wait's message (lock_probes_ on),
    /// then its stack cut to the program's frames (drop_reporter_frames).
    void attach_lock_owner(events::event_message& msg);
    /// The message's frames (event_stack_depth_ of them) from `reporter`.
    void attach_stack(events::event_message& msg, tid_t reporter);

    // Records with a buffered message when we came: messages queued later
    // exist because of our changes and are consumed at detach.
    std::unordered_set<target_addr> listed_at_attach_;
};

/// A session's usage window for the length of a scope: opened by the
/// constructor, closed on every way out.
class usage_window_scope {
public:
    usage_window_scope(session& s, counter_depth depth, std::size_t named_rows = usage_window::all_named) : s_(s)
    {
        s_.open_usage_window(depth, named_rows);
    }
    ~usage_window_scope() { s_.close_usage_window(); }
    usage_window_scope(const usage_window_scope&) = delete;
    usage_window_scope& operator=(const usage_window_scope&) = delete;

private:
    session& s_;
};

}  // namespace tdctl::core
