// Thread statistics of SPEC §6, defined for Linux's one-LWP-per-thread model:
// exact time integrals of the kernel's per-task accounting
// (/proc/PID/task/TID/schedstat: ns on a CPU, ns waiting on a run queue),
// sampled at enable/reset, at each LWP's birth (clone stop) and death (exit
// stop, while the task can still be read), and when asked. Time on a CPU is
// the process's CPU-time clock where it can be read: it also holds what each
// LWP spends after its exit stop, which no file shows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/accounting/lwp_lifecycle.hpp"
#include "ptrace/task_files.hpp"

namespace tdctl::core {

/// An average as a fraction over the same window. Units: LWP·ns / ns.
struct stat_fraction {
    std::uint64_t num = 0;
    std::uint64_t den = 0;
    double value() const { return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den); }
};

/// Halves numerator and denominator together until both fit in int (the
/// ratio is what is specified), for td_ta_stats_t.
void reduce_to_int(std::uint64_t num, std::uint64_t den, int& out_num, int& out_den);

/// The four time averages of td_ta_stats_t, unreduced.
struct stat_averages {
    stat_fraction nrunnable;      ///< LWPs running or waiting for a CPU
    stat_fraction a_concurrency;  ///< LWPs on a CPU
    stat_fraction nlwps;          ///< LWPs alive
    stat_fraction nidle;          ///< LWPs alive but not runnable (nlwps − nrunnable)
    double window_seconds = 0;    ///< length of the window
};

class stats_collector final : public lwp_lifecycle {
public:
    /// Reads each LWP's schedstat through `files` (kept open between samples).
    explicit stats_collector(procfs::task_files& files) : files_(&files) {}

    bool is_enabled() const { return enabled_; }

    /// Turns gathering on (resetting, as the seed says) or off (freezing the
    /// averages at this moment). `lwps` are the target's LWPs now.
    void enable(bool on, const std::vector<tid_t>& lwps);
    /// Zeroes the window and starts a new one now (if enabled).
    void reset(const std::vector<tid_t>& lwps);

    // lwp_lifecycle; nothing while gathering is off.
    void on_birth(tid_t lwp) override;
    void on_death(tid_t lwp) override;
    void on_vanished(tid_t lwp) override;
    void on_exec(tid_t former, tid_t leader) override;

    /// The averages now (enabled) or as frozen (disabled).
    stat_averages averages(const std::vector<tid_t>& lwps);

private:
    struct base {
        std::uint64_t cpu_ns = 0, wait_ns = 0;
        std::uint64_t since_ns = 0;   // monotonic time the LWP entered the window
    };
    struct sums {
        std::uint64_t cpu_ns = 0, wait_ns = 0, alive_ns = 0, window_ns = 0;
    };
    void start_window(const std::vector<tid_t>& lwps);
    sums current(const std::vector<tid_t>& lwps);
    sums settle(sums raw);
    static stat_averages to_averages(const sums& s);

    procfs::task_files* files_;
    bool enabled_ = false;
    std::uint64_t t0_ns_ = 0;
    std::optional<std::uint64_t> process_cpu0_ns_;  // the process CPU-time clock at t0
    std::unordered_map<tid_t, base> live_;
    sums dead_;       // LWPs that died inside the window
    sums frozen_;     // the window as it was when gathering was turned off
    sums reported_;   // the last integrals reported in this window (see settle())
};

/// Monotonic clock, ns.
std::uint64_t monotonic_ns();

}  // namespace tdctl::core
