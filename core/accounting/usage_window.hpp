// Each LWP's share of a window of time: CPU time, run-queue wait and the other
// counters of lwp_counters, from the cumulative /proc counters read when the
// window opens, at each LWP's birth (its clone stop: the kernel starts a new
// task's counters at 0) and death (its exit stop, while the task can still be
// read), and when the window is taken. So a thread that lives and dies inside
// the window counts fully. `top` takes one window per interval; `watch` and
// `sleep` take one over their whole run (the on-CPU / run-queue / off-CPU split),
// naming only the LWPs that can rank among the rows the split shows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/types.hpp"
#include "core/accounting/lwp_lifecycle.hpp"
#include "core/accounting/lwp_usage.hpp"
#include "ptrace/task_files.hpp"

namespace tdctl::core {

/// One LWP over a window.
struct lwp_window_usage {
    tid_t tid;
    std::string name;            ///< comm at the last read (at its exit stop for an LWP that ended)
    lwp_counters grown;          ///< what each counter grew by inside the window
    std::uint64_t alive_ns = 0;  ///< how long it was alive inside the window, ns
    bool born = false;           ///< born inside the window (seen at its clone stop)
    bool ended = false;          ///< ended inside the window (seen at its exit stop)

    /// Time alive but neither on a CPU nor waiting for one (blocked, sleeping),
    /// ns: alive − on CPU − run-queue wait, 0 rather than negative (the
    /// kernel charges a run-queue wait only when it ends).
    std::uint64_t off_ns() const;
};

/// A window that was taken: its length and every LWP alive in it.
struct window_usage {
    std::uint64_t window_ns = 0;
    std::vector<lwp_window_usage> lwps;
};

/// An LWP's share of a window as `top` shows it.
struct lwp_rates {
    double usr = 0;       ///< % of one CPU: user time (CPU time split in stat's utime:stime ratio)
    double sys = 0;       ///< % of one CPU: system time
    double wait = 0;      ///< % of the window runnable on a run queue, waiting for a CPU
    double off = 0;       ///< % of the window alive but off CPU and not waiting for one (blocked)
    double cswch = 0;     ///< voluntary context switches per second
    double nvcswch = 0;   ///< involuntary context switches per second
    double minflt = 0;    ///< minor faults per second
    double majflt = 0;    ///< major faults per second
};

/// What a time split ranks LWPs by: on-CPU + run-queue time inside the window, ns.
std::uint64_t runnable_ns(const lwp_window_usage& u);

/// The indices of w.lwps in the order a time split shows them: the most
/// runnable_ns() first, equal ones in the order w.lwps lists them.
std::vector<std::size_t> split_rank_order(const window_usage& w);

/// The rates of `u` over a window of `window_ns` (all 0 for an empty window).
lwp_rates rates_of(const lwp_window_usage& u, std::uint64_t window_ns);

class usage_window final : public lwp_lifecycle {
public:
    /// Every LWP of a window is named.
    static constexpr std::size_t all_named = static_cast<std::size_t>(-1);

    /// Opens the window now. `lwps`: the target's LWPs now; `depth`: which
    /// counters each read fills (counter_depth::times reads schedstat, and
    /// comm for a name). `named_rows`: how many of a taken window's LWPs,
    /// ranked by on-CPU + run-queue time (most first; equal ones in the
    /// order take() lists them), are shown by name. At `times` depth only
    /// those are named: an LWP that ends after `named_rows` others that ended
    /// with at least its time cannot rank among them and is left unnamed,
    /// which saves its comm file (open, read, close) at every exit stop.
    usage_window(procfs::task_files& files, counter_depth depth, const std::vector<tid_t>& lwps,
                 std::size_t named_rows = all_named);

    /// Every LWP's share since the window opened or was last taken, those
    /// that ended included (first the live ones in the order of `lwps`, then
    /// the ended ones as they ended); the next window starts now. `lwps`: the
    /// target's LWPs now. An LWP that cannot be read now is left for its exit
    /// stop, which counts it in the next window. Names: see the constructor
    /// (an unnamed LWP's name is "").
    window_usage take(const std::vector<tid_t>& lwps);

    // lwp_lifecycle. An LWP gone without an exit stop loses what it did
    // since the last read.
    void on_birth(tid_t lwp) override;
    void on_death(tid_t lwp) override;
    void on_vanished(tid_t lwp) override;
    void on_exec(tid_t former, tid_t leader) override;

private:
    procfs::task_files* files_;
    counter_depth depth_;
    std::size_t named_rows_;
    std::uint64_t start_ns_ = 0;
    // The named_rows_ largest on-CPU + run-queue times (ns) of the LWPs that
    // ended in this window, least on top.
    std::priority_queue<std::uint64_t, std::vector<std::uint64_t>, std::greater<>> ranked_ended_;
    // The counters an LWP had when this window started counting it.
    struct base {
        lwp_counters at;
        std::uint64_t since_ns = 0;   // monotonic time it entered the window
        bool born = false;
    };
    std::unordered_map<tid_t, base> live_;
    std::vector<lwp_window_usage> ended_;

    lwp_window_usage share(const base& b, const lwp_counters_row& now, std::uint64_t now_ns) const;
    // Whether an LWP that ended with `runnable` ns may rank among the first
    // named_rows_ (recorded if so).
    bool may_rank_at_end(std::uint64_t runnable);
    // Names the live LWPs of `out` (its first `live` entries) that rank among
    // the first named_rows_, at `times` depth.
    void name_ranked_live(window_usage& out, std::size_t live);
};

}  // namespace tdctl::core
