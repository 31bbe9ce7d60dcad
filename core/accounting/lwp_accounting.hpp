// Per-LWP accounting of a live target: the statistics (td_ta_enable_stats,
// td_ta_reset_stats, td_ta_get_stats; seed 000, SPEC §6), per-LWP resource
// usage (pthread_getrusage_np from outside; seed 001) and LWP times
// (_lwp_info; seed 004), and the usage window `top` and the time split read.
// Told of each LWP's birth, exit stop, disappearance and exec, so threads
// that live and die between two samples count fully.
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <thread_db.h>

#include "base/types.hpp"
#include "core/session/live_target.hpp"
#include "core/accounting/lwp_lifecycle.hpp"
#include "core/accounting/lwp_usage.hpp"
#include "core/accounting/stats_collector.hpp"
#include "core/td_result.hpp"
#include "core/accounting/usage_window.hpp"

namespace tdctl::core {

/// td_ta_get_stats for one target (seed 000, SPEC §6).
struct thread_stats {
    td_ta_stats_t td{};            ///< the int fractions, halved together until they fit
    stat_averages averages;        ///< the unreduced 64-bit parts and the doubles
    std::string nthreads_source;   ///< "__nptl_nthreads" (the thread library's counter) or "/proc"
    std::string r_concurrency_source;  ///< symbol read, or "" when unavailable (r_concurrency 0)
    bool enabled = false;
};

class lwp_accounting final : public lwp_lifecycle {
public:
    /// `target` must outlive this.
    explicit lwp_accounting(live_target& target) : target_(target), stats_(target.files()) {}

    // ---- statistics (core/td_ta_enable_stats.cpp, td_ta_reset_stats.cpp, td_ta_get_stats.cpp)

    /// On: reset and start gathering; off: freeze the averages. Works with or
    /// without a thread library.
    td_status enable_stats(bool on);
    td_status reset_stats();
    /// Gathering (enable_stats(true)): each birth and death counts at its stop.
    bool stats_enabled() const { return stats_.is_enabled(); }
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

    // lwp_lifecycle: told to the statistics and the open window
    void on_birth(tid_t lwp) override;
    void on_death(tid_t lwp) override;
    void on_vanished(tid_t lwp) override;
    void on_exec(tid_t former, tid_t leader) override;

private:
    /// The signal-delivery-stops tdctl saw for `lwp` (ru_nsignals).
    std::uint64_t signals_of(tid_t lwp) const;

    live_target& target_;
    stats_collector stats_;
    std::optional<usage_window> usage_;
    bool rusage_enabled_ = false;
};

/// An accounting's usage window for the length of a scope: opened by the
/// constructor, closed on every way out.
class usage_window_scope {
public:
    usage_window_scope(lwp_accounting& a, counter_depth depth, std::size_t named_rows = usage_window::all_named)
        : a_(a)
    {
        a_.open_usage_window(depth, named_rows);
    }
    ~usage_window_scope() { a_.close_usage_window(); }
    usage_window_scope(const usage_window_scope&) = delete;
    usage_window_scope& operator=(const usage_window_scope&) = delete;

private:
    lwp_accounting& a_;
};

}  // namespace tdctl::core
