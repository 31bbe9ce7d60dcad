// Executes tdctl's commands against a session: the same words in the REPL,
// in -e/-x scripts and on stdin. Commands that let the target run (watch,
// stop, sleep) service every stop in one poll() loop with the signalfd, so
// Ctrl-C ends them cleanly.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cmd/command_line.hpp"
#include "cmd/output.hpp"
#include "cmd/run_waker.hpp"
#include "cmd/signal_source.hpp"
#include "core/session.hpp"
#include "events/event_summary.hpp"
#include "events/lock_contention.hpp"

namespace tdctl::cmd {

enum class command_status {
    ok,
    failed,      ///< the command did not do what was asked (batch: exit 2)
    quit,        ///< `quit`, or end of input
    nothing,     ///< it ran and found nothing there: TD_NOMSG, no event reported (batch: exit 1, like grep)
    timed_out,   ///< `stop --for` ended with no hit (batch: exit 3)
};

/// Why run_until() returned.
enum class run_end { done, timeout, signal, exited, detached };

struct command_entry;
struct subcommand_entry;

class trace_output;

class runner {
public:
    /// `launched`: the session's target was launched by tdctl (not attached to).
    runner(std::unique_ptr<core::session> session, output& out, signal_source& signals, bool launched);

    /// The session of the current target, or of the last one (detached or
    /// exited) until `attach` or `run` starts another. Only while has_session().
    core::session& session() { return *session_; }
    /// False only after an `attach` or `run` that failed: the last session
    /// was let go first (its change journal is the one the guardian watches).
    bool has_session() const { return session_ != nullptr; }
    /// The current session's target was launched by tdctl.
    bool launched() const { return launched_; }
    ~runner();
    runner(const runner&) = delete;
    runner& operator=(const runner&) = delete;

    /// `--trace`: told of the session's LWPs when a `watch` starts (threads
    /// born or gone while nothing watched). Borrowed; nullptr for none.
    void set_trace(trace_output* trace) { trace_ = trace; }

    /// Executes one line; `where` names it in error messages ("-e 2",
    /// "script.tdctl:4", "stdin:3"). Blank lines and comments are ok.
    command_status execute(const std::string& line, const std::string& where);

    /// The default of a launch with no commands: `watch` until the target exits.
    command_status watch_until_exit();

    /// Services target stops without blocking, printing what a user should
    /// see, and notes the target's exit.
    void poll_target();
    /// Lets the target run, printing what a user should see, until
    /// `input_fd` (when >= 0) is readable, a signal for tdctl is pending, or
    /// timeout_ms passes (-1: no bound): what the prompt and stdin do while
    /// they wait for a line. Without a target, only waits.
    void wait_for_input(int input_fd, int timeout_ms);

    /// The signal (SIGINT/SIGTERM/SIGHUP) that ended the last command, or 0.
    int last_signal() const { return last_signal_; }
    /// A SIGTERM or SIGHUP arrived: the caller should detach and exit.
    bool must_exit() const { return must_exit_; }
    /// The session detaches right after the command about to run (the last
    /// of a batch that ends the session): a `watch` then leaves putting back
    /// what it armed to the detach, which does it in the same stop of every
    /// thread, instead of stopping them all once more before it.
    void set_detach_follows(bool follows) { detach_follows_ = follows; }
    /// Another command follows the one about to run at once (a batch's next
    /// line): a command that only looks at or edits the stopped target then
    /// leaves its threads stopped for it (core::session::end_command_hold).
    /// Holds for one execute() only.
    void set_command_follows(bool follows) { command_follows_ = follows; }
    /// A signal taken outside a command (at the prompt, while waiting for
    /// input): SIGTERM and SIGHUP end the session as they do during one.
    void take_signal(int sig);

    /// Raw wait status once the target has exited.
    std::optional<int> target_exit_status() const { return exit_status_; }
    /// A target to act on: alive, not exited, not detached.
    bool has_target() const;

    /// Prints the exit record for a raw wait status.
    void print_exit(int raw_status);

    /// The words of one command line, the command's name first.
    using words = std::vector<std::string>;
    /// A command's handler (commands.hpp); `where` names the line in messages.
    using handler = command_status (runner::*)(const words& w, const std::string& where);

private:
    /// Before a command runs: a stop of every thread that lingers is let go
    /// unless the command works on the stopped target; such a command's own
    /// hold may linger when another command (or the detach) follows at once.
    void share_stop_round(const command_entry& command, bool follows);
    friend std::span<const command_entry> command_table();

    // The handlers, one group a file: cmd_threads.cpp, cmd_event.cpp,
    // cmd_run.cpp (stop, watch, sleep, continue, interrupt, detach, kill),
    // cmd_stats.cpp (stats, rusage, lwpinfo), cmd_top.cpp, cmd_bt.cpp, cmd_deadlock.cpp; runner.cpp (quit, help).
    command_status cmd_threads(const words& w, const std::string& where);
    command_status cmd_event(const words& w, const std::string& where);
    command_status cmd_event_addr(const words& w, const std::string& where);
    command_status cmd_event_set(const words& w, const std::string& where);
    command_status cmd_event_clear(const words& w, const std::string& where);
    command_status cmd_event_mask(const words& w, const std::string& where, bool set);
    command_status cmd_event_enable(const words& w, const std::string& where);
    command_status cmd_event_getmsg(const words& w, const std::string& where);
    command_status cmd_stop(const words& w, const std::string& where);
    command_status cmd_watch(const words& w, const std::string& where);
    command_status cmd_sleep(const words& w, const std::string& where);
    command_status cmd_continue(const words& w, const std::string& where);
    command_status cmd_interrupt(const words& w, const std::string& where);
    command_status cmd_detach(const words& w, const std::string& where);
    command_status cmd_kill(const words& w, const std::string& where);
    command_status cmd_quit(const words& w, const std::string& where);
    command_status cmd_attach(const words& w, const std::string& where);
    command_status cmd_run(const words& w, const std::string& where);
    /// Makes `next` the session commands act on (after `attach` or `run`).
    void start_session(std::unique_ptr<core::session> next, bool launched);
    /// No target to act on, so `attach` or `run` may start one; false after
    /// the error that names the current target.
    bool may_start_session(const std::string& where);
    command_status cmd_help(const words& w, const std::string& where);
    command_status cmd_stats(const words& w, const std::string& where);
    command_status cmd_stats_enable(const words& w, const std::string& where);
    command_status cmd_stats_reset(const words& w, const std::string& where);
    command_status cmd_stats_show(const words& w, const std::string& where);
    command_status cmd_stats_watch(const words& w, const std::string& where);
    command_status cmd_rusage(const words& w, const std::string& where);
    command_status cmd_rusage_switch(const words& w, const std::string& where);
    command_status cmd_rusage_collect(const words& w, const std::string& where);
    command_status cmd_lwpinfo(const words& w, const std::string& where);
    command_status cmd_bt(const words& w, const std::string& where);
    command_status cmd_deadlock(const words& w, const std::string& where);
    /// At most this many frames of each deadlocked thread's stack.
    static constexpr int deadlock_stack_depth = 32;
    command_status cmd_top(const words& w, const std::string& where);
    command_status cmd_summary(const words& w, const std::string& where);
    command_status cmd_locks(const words& w, const std::string& where);

    /// The summary records of `counts` (`command`: "watch", "summary"), the
    /// first `top` call sites.
    void print_summary(const std::string& command, const events::summary_counts& counts, std::size_t top);

    /// `locks`' events: TD_LOCK_TRY, TD_SLEEP, TD_READY (and TD_PRI_INHERIT
    /// when reported); nullopt after the error that says the agent is needed.
    std::optional<std::vector<td_event_e>> lock_watch_events(const std::string& where);
    /// Runs the target, counting lock events into `counts`: one report at the
    /// end (after `for_seconds`, Ctrl-C or the exit), or one per `interval`
    /// each over its own interval.
    void run_lock_reports(events::lock_contention& counts, std::optional<double> for_seconds,
                          std::optional<double> interval, std::size_t top);
    /// One `locks` report: its head and the first `top` locks.
    void print_locks(const events::lock_contention& counts, std::size_t report, double span, std::size_t top);
    /// `watch`'s events: EVENTS checked against what the library reports, or
    /// every event it reports when `text` is empty. nullopt after an error.
    std::optional<std::vector<td_event_e>> watch_events(const std::string& text, const std::string& where);
    /// `stats watch`'s rows: one per `interval` seconds, up to `count`,
    /// averaged over the interval since `prev`.
    command_status stats_watch_rows(core::stat_averages prev, double interval, std::optional<long long> count,
                                    const std::string& where);
    /// One round of `rusage collect`: every row of `which` ("", "all" or a TID).
    bool rusage_round(const std::string& which, const std::string& where);
    /// The split of every thread's time over the run of `command` ("watch",
    /// "sleep"), from the usage window taken at its end.
    void print_time_split(const std::string& command, const core::window_usage& split);
    /// At most this many rows in that split; the other threads are summed in one.
    static constexpr std::size_t time_split_max_rows = 32;
    // The rows of a time split that can show a thread by name: the first
    // time_split_max_rows, or all of max + 1 (time_split_rows() folds no lone row).
    static constexpr std::size_t time_split_named_rows = time_split_max_rows + 1;
    /// LWPs of "" / "all" (every task of the process) or of one TID.
    std::optional<std::vector<tid_t>> lwp_list(const std::string& arg, const std::string& where);

    /// Runs the target until `done` says so, `seconds` pass, a signal
    /// arrives or the target exits. Every session event goes to `on_event`.
    run_end run_until(std::optional<double> seconds, const std::function<bool(const core::session_event&)>& on_event);
    /// The thread that ends the target's wait for a signal or input, made
    /// at the first run.
    run_waker& waker();
    /// run_until() showing every event, for `seconds` (none: until a signal or the end).
    run_end run_for(std::optional<double> seconds);
    /// A target held (at its entry point, by `interrupt`) runs now.
    void let_run();
    /// Default handling of a session event outside a command that expects it.
    void show(const core::session_event& ev);
    /// The exit record for a raw wait status, remembered as the target's end.
    void note_exit(int raw_status);

    command_status usage_error(const std::string& where, const std::string& message);
    command_status td_error(td_err_e err, const std::string& what);
    bool require_target(const std::string& where);
    bool require_agent(const std::string& where);
    /// A command of one word (`continue`, `detach`...) with a target to act
    /// on; false after the usage or no-target error.
    bool bare_command_ready(const words& w, const std::string& where, const char* name);
    /// The options of words[first...] by `grammar`; nullopt after a usage error.
    std::optional<run_options> parse_options(const words& w, std::size_t first, const run_option_grammar& grammar,
                                             const std::string& where);
    std::optional<std::vector<td_event_e>> parse_events(const std::string& text, const std::string& where);
    /// A TID typed by the user, or nullopt after a usage error naming `accepted`.
    std::optional<tid_t> parse_tid_word(const std::string& text, const std::string& where, const char* accepted);
    std::optional<core::thread_handle> handle_for(const std::string& tid_text, const std::string& where);

    std::unique_ptr<core::session> session_;
    bool launched_ = false;
    output& out_;
    signal_source& signals_;
    int last_signal_ = 0;
    bool must_exit_ = false;
    bool detach_follows_ = false;
    bool command_follows_ = false;
    std::optional<int> exit_status_;
    bool detached_ = false;
    // Every printed message, counted (output's observer for this runner's life).
    events::event_summary summary_;
    trace_output* trace_ = nullptr;
    // Declared last: its thread flushes out_ and is joined first.
    std::unique_ptr<run_waker> waker_;
};

/// Help text: the command list, or one command's usage.
std::string help_text(const std::string& command);

}  // namespace tdctl::cmd
