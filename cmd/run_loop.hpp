// Letting the target run while tdctl waits on it: for a command (watch,
// stop, sleep, top...) until it is done, for a time, a signal or the
// target's end; or while the prompt and stdin wait for a line. Every stop is
// taken by one blocking wait (core::session::pump) that the waker's thread
// ends for a signal or input, so Ctrl-C ends a run cleanly. What the target
// does on the way is shown, and its exit noted once.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "cmd/output.hpp"
#include "cmd/run_waker.hpp"
#include "cmd/session_slot.hpp"
#include "cmd/signal_source.hpp"
#include "core/session/session.hpp"

namespace tdctl::cmd {

/// Why run_loop::run_until() returned.
enum class run_end { done, timeout, signal, exited, detached };

class run_loop {
public:
    /// All three are borrowed and must outlive the loop.
    run_loop(session_slot& target, output& out, signal_source& signals);
    /// Joins the waker's thread (which flushes `out`).
    ~run_loop();
    run_loop(const run_loop&) = delete;
    run_loop& operator=(const run_loop&) = delete;

    /// Runs the target until `on_event` says so, `seconds` pass, a signal
    /// arrives or the target exits. Every session event goes to `on_event`.
    run_end run_until(std::optional<double> seconds, const std::function<bool(const core::session_event&)>& on_event);
    /// run_until() showing every event, for `seconds` (none: until a signal or the end).
    run_end run_for(std::optional<double> seconds);
    /// Lets the target run, printing what a user should see, until
    /// `input_fd` (when >= 0) is readable, a signal for tdctl is pending, or
    /// timeout_ms passes (-1: no bound): what the prompt and stdin do while
    /// they wait for a line. Without a target, only waits.
    void wait_for_input(int input_fd, int timeout_ms);
    /// Waits `seconds` with no target to service, ended early by a signal
    /// (then taken as take_signal() does).
    void pause(double seconds);
    /// Services target stops without blocking, printing what a user should
    /// see, and notes the target's exit.
    void poll_target();

    /// Default handling of a session event outside a command that expects it.
    void show(const core::session_event& ev);
    /// Prints the exit record for a raw wait status.
    void print_exit(int raw_status);
    /// The exit record for a raw wait status, remembered as the target's end.
    void note_exit(int raw_status);
    /// A target held (at its entry point, by `interrupt`) runs now.
    void let_run();

    /// A signal taken outside a run (at the prompt, while waiting for
    /// input): SIGTERM and SIGHUP end the session as they do during one.
    void take_signal(int sig);
    /// The signal descriptor (signal_source): a blocking attach watches it
    /// to give up when a signal for tdctl comes.
    int signal_fd() const { return signals_.fd(); }
    /// The signal (SIGINT/SIGTERM/SIGHUP) that ended the last run, or 0.
    int last_signal() const { return last_signal_; }
    /// A SIGTERM or SIGHUP arrived (or the output broke): the caller should
    /// detach and exit.
    bool must_exit() const { return must_exit_; }

private:
    /// The thread that ends the target's wait for a signal or input, made
    /// at the first run.
    run_waker& waker();
    /// How a run ends now that the target is gone or nobody can read what
    /// happens next (then as SIGTERM would end it); nullopt otherwise.
    std::optional<run_end> target_or_output_ended();
    /// A signal for tdctl, taken: the run ends.
    bool signal_arrived(run_waker& waker);
    /// How long the next wait on the target may block (-1: no bound), or
    /// nullopt once `deadline` has passed.
    std::optional<int> next_wait_ms(const std::optional<std::chrono::steady_clock::time_point>& deadline,
                                    const run_waker& waker) const;

    session_slot& target_;
    output& out_;
    signal_source& signals_;
    int last_signal_ = 0;
    bool must_exit_ = false;
    // Declared last: its thread flushes out_ and is joined first.
    std::unique_ptr<run_waker> waker_;
};

}  // namespace tdctl::cmd
