// While a command runs the target (watch, stop, sleep, top...), the tracer
// thread sleeps in one blocking waitpid() per stop: no poll(), no SIGCHLD
// descriptor, no look that finds nothing. This thread ends that wait when the
// tracer must look up from it: a SIGINT/SIGTERM/SIGHUP is pending on the
// signal descriptor, or the command's deadline has passed. It also writes
// out the lines the command printed, at most `flush_interval` after they
// were printed, so the tracer makes no write per stop.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "base/unique_fd.hpp"

namespace tdctl::cmd {

class run_waker {
public:
    using clock = std::chrono::steady_clock;
    /// How long a printed line may wait in the output buffer during a run.
    static constexpr std::chrono::milliseconds flush_interval{20};

    /// `signal_fd`: the controller's signal descriptor (signal_source), only
    /// polled here, never read. `flush`: writes out buffered output; called
    /// on this thread, so it must be safe beside the tracer's own printing
    /// (stdio's stream lock makes fflush so).
    run_waker(int signal_fd, std::function<void()> flush);
    /// Stops and joins the thread.
    ~run_waker();
    run_waker(const run_waker&) = delete;
    run_waker& operator=(const run_waker&) = delete;

    /// Whether the blocking wait can be ended here (ptrace::waiter::can_wake_blocked_wait,
    /// probed once, and the thread started). When false, callers wait the other way.
    bool usable() const { return usable_; }

    /// A run starts: from now on a pending signal, or `deadline` passing,
    /// sets attention() and ends a blocked wait; output is flushed every
    /// flush_interval.
    void begin_run(std::optional<clock::time_point> deadline);
    /// The run is over: the thread sleeps until the next begin_run().
    void end_run();

    /// The flag a blocking wait watches (ptrace::waiter::wait_until_woken).
    const std::atomic<bool>& attention() const { return attention_; }
    /// The tracer looked at the signals and the clock: the flag is cleared
    /// (a signal still pending sets it again within flush_interval).
    void clear_attention() { attention_.store(false); }

private:
    void run();

    std::function<void()> flush_;
    int signal_fd_;
    unique_fd control_;  // eventfd: begin_run, end_run and the destructor wake the thread
    std::atomic<bool> attention_{false};
    std::mutex mutex_;
    bool running_ = false;  // guarded by mutex_
    bool stopping_ = false;  // guarded by mutex_
    std::optional<clock::time_point> deadline_;  // guarded by mutex_
    bool usable_ = false;
    std::thread thread_;
};

}  // namespace tdctl::cmd
