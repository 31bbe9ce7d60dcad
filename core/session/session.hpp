// A session: one live target and the parts that work on it. The session
// makes them (attach, launch), takes every stop of the target and hands it
// to the part it concerns (the pump and its dispatch), holds and releases
// the threads for commands, follows an exec, and on detach has every part
// put back what it changed, so the target's text and data are as they were.
// Each part keeps its own state and takes the live target, never the
// session: core/session/event_watch.hpp (sites, arming, reports), birth_policy.hpp
// (new threads' reporting), report_changes.hpp (masks and flags, journaled),
// late_reports.hpp (settling before the sites go), event_stream.hpp (events
// drained from the agent's rings), event_stacks.hpp,
// lwp_accounting.hpp (statistics, rusage, lwpinfo, usage windows) and
// agent_routing.hpp (calls routed to an agent loaded by attach).
#pragma once

#include <memory>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/inject/agent_loader.hpp"
#include "core/inject/agent_routing.hpp"
#include "core/session/birth_policy.hpp"
#include "core/stacks/event_stacks.hpp"
#include "core/session/event_stream.hpp"
#include "core/session/event_watch.hpp"
#include "core/session/late_reports.hpp"
#include "core/session/live_target.hpp"
#include "core/accounting/lwp_accounting.hpp"
#include "core/session/report_changes.hpp"
#include "core/td_result.hpp"
#include "events/event_message.hpp"
#include "ptrace/traced_process.hpp"

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

class session final {
public:
    /// Attaches to a running process (SPEC §4); an attach that meets an exec
    /// under way is made again once it is done (for up to 1 s). Throws
    /// tdctl::error with one actionable line when the attach cannot be
    /// done, or (os, EINTR) when
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
    ~session();
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    /// The process, its modules, threads and thread library.
    live_target& target() { return target_; }
    /// Loads libtdagent.so into the attached process (core/inject/agent_loader.hpp),
    /// or finds the same version already there, and re-reads the modules:
    /// afterwards the session is as after an attach to a process that had
    /// the agent loaded (the tdagent backend), and the calls of the modules
    /// loaded before it are routed to it (core/inject/agent_routing.hpp); with
    /// `follow_loads`, so are those of modules loaded while attached (a trap
    /// byte at r_brk until detach, which a SIGKILL of tdctl can leave
    /// behind). Call right after attach(), every thread still stopped;
    /// returns so. Throws tdctl::error (target) with the reason on a refusal
    /// or failure (nothing left in the target), (os, EINTR) when cancel_fd
    /// became readable first.
    agent_load_report load_agent(const agent_file& agent, int cancel_fd = -1, bool follow_loads = false);

    // ---- the parts

    event_watch& watch() { return watch_; }
    /// Events through the agent's rings, without a stop (`watch --stream`).
    event_stream& stream() { return stream_; }
    event_stacks& stacks() { return stacks_; }
    lwp_accounting& accounting() { return accounting_; }
    /// The td_* writes of masks and flags a user asks for, journaled.
    report_changes& changes() { return changes_; }
    const agent_routing& routing() const { return routing_; }

    // ---- watching and stopping (the watch, with the hold and the settling around it)

    /// event_watch::arm(), an arm in force disarmed first.
    td_status arm(const std::vector<td_event_e>& events);
    /// Undoes arm(): global mask and enable flags back to what they were
    /// before it, late reports settled (taken silently), sites out.
    void disarm();
    /// Removes the `stop` breakpoints planted with watch().plant_stops(),
    /// whose next hit holds the whole target and yields a stopped_at_event
    /// (target held meanwhile).
    void clear_stops();

    // ---- running

    /// Lets the target run, handling every stop, until one gives something
    /// a user should see, timeout_ms passes (-1: no bound; 0: only what is
    /// pending now), or ptrace::waiter::wake() ends the wait (another
    /// thread: a signal, input). Returns what a user should see (maybe
    /// nothing), with what the same stop queued. Why it ended without
    /// anything: target().process().last_wait().
    std::vector<session_event> pump(int timeout_ms);

    // ---- the hold

    /// Holds every LWP stopped (the `interrupt` command, and around edits that
    /// must not race the target).
    void interrupt();
    /// Releases what interrupt() or a stopped_at_event held; a thread stopped
    /// at a `stop` breakpoint steps over it. The `stop` breakpoints go.
    void resume();
    bool is_held() const { return held_; }
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

    // ---- the end

    /// Puts back everything every part changed, removes the sites, detaches.
    void detach();
    /// Kills the target.
    void kill();
    bool is_alive() const { return target_.is_alive(); }

private:
    session(std::unique_ptr<ptrace::traced_process> process, bool late_agent_serves);
    /// Reads the target's modules and finds its thread library; the parts
    /// that depend on it start over. `early`: see live_target::read_modules().
    void load_symbols(std::optional<symbols::module_set> early = std::nullopt);
    /// Launch through an explicitly named loader, or an attach just after an
    /// exec while the loader runs (the leader's pc in its code): runs the
    /// leader from one _dl_debug_state notification to the next until a
    /// thread library is mapped (at most max_loader_notifications). Returns
    /// held as it found it.
    void follow_loader();
    static constexpr int max_loader_notifications = 64;

    // ---- the dispatch: each stop to the part it concerns
    void handle(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent);
    /// The handler late_reports and the agent loader hand stops to.
    silent_stop_handler silent_handler();
    void on_breakpoint(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent);
    /// A stop at a `stop` breakpoint: the whole target is held.
    void hold_at_stop(td_event_e event, const ptrace::stop_event& ev, std::vector<session_event>& out);
    void on_thread_created(const ptrace::stop_event& ev);
    void on_thread_exiting(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent);
    void on_thread_exited(tid_t lwp);
    void on_exec(const ptrace::stop_event& ev, std::vector<session_event>& out);
    void on_process_exited(const ptrace::stop_event& ev, std::vector<session_event>& out);

    // The longest a look (pump(0)) goes on taking stops, s.
    static constexpr double pump_look_seconds = 0.02;

    // Declared in the order they are made: each part takes those before it.
    live_target target_;
    report_changes changes_;
    birth_policy births_;
    event_stacks stacks_;
    event_watch watch_;
    event_stream stream_;
    late_reports late_reports_;
    agent_routing routing_;
    lwp_accounting accounting_;
    bool held_ = false;
    // Stopped, not held: the attach's or the last command's stop of every
    // thread, kept for the command that follows at once (release_lingering).
    bool lingering_ = false;
    bool hold_may_linger_ = false;
    tid_t stopped_reporter_;
};

}  // namespace tdctl::core
