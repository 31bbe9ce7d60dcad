// While tdctl lets the target run (a command such as watch, stop, sleep or
// top, or the prompt and stdin waiting for a line), the tracer thread sleeps
// in one blocking waitpid() per stop (ptrace::waiter::wait_any): no poll(),
// no SIGCHLD descriptor, no look that finds nothing. This thread ends that
// wait when the tracer must look up from it: a SIGINT/SIGTERM/SIGHUP is
// pending on the signal descriptor, or input is (the run's watched
// descriptor). It also writes out the lines the command printed, at most
// `flush_interval` after they were printed, so the tracer makes no write
// per stop.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
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

    /// The thread started. When false (no thread could be made), nothing
    /// ends a wait for a signal: callers bound their waits.
    bool usable() const { return usable_; }

    /// A run starts: from now on a pending signal, or `watch_fd` (when >= 0)
    /// becoming readable, sets attention() and ends the tracer's wait
    /// (ptrace::waiter::wake); output is flushed every flush_interval.
    void begin_run(int watch_fd = -1);
    /// The run is over: the thread sleeps until the next begin_run().
    void end_run();

    /// A signal or input is pending (set by this thread; no system call to read).
    bool attention() const { return attention_.load(); }
    /// The tracer looked at the signals and the input: the flag is cleared
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
    int watch_fd_ = -1;  // guarded by mutex_
    bool usable_ = false;
    std::thread thread_;
};

}  // namespace tdctl::cmd
