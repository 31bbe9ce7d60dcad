#include "core/accounting/usage_window.hpp"

#include <algorithm>

#include "core/accounting/stats_collector.hpp"

namespace tdctl::core {

namespace {

// later − earlier per counter; a counter that went down (a TID reused
// unseen) counts from 0.
lwp_counters grown_since(const lwp_counters& later, const lwp_counters& earlier)
{
    auto d = [](std::uint64_t a, std::uint64_t b) { return a >= b ? a - b : a; };
    return {d(later.cpu_ns, earlier.cpu_ns),           d(later.wait_ns, earlier.wait_ns),
            d(later.utime_ticks, earlier.utime_ticks), d(later.stime_ticks, earlier.stime_ticks),
            d(later.minflt, earlier.minflt),           d(later.majflt, earlier.majflt),
            d(later.nvcsw, earlier.nvcsw),             d(later.nivcsw, earlier.nivcsw)};
}

}  // namespace

std::uint64_t lwp_window_usage::off_ns() const
{
    const std::uint64_t runnable = grown.cpu_ns + grown.wait_ns;
    return alive_ns > runnable ? alive_ns - runnable : 0;
}

std::uint64_t runnable_ns(const lwp_window_usage& u)
{
    return u.grown.cpu_ns + u.grown.wait_ns;
}

std::vector<std::size_t> split_rank_order(const window_usage& w)
{
    std::vector<std::size_t> order(w.lwps.size());
    for (std::size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::ranges::stable_sort(order, [&](std::size_t a, std::size_t b) {
        return runnable_ns(w.lwps[a]) > runnable_ns(w.lwps[b]);
    });
    return order;
}

lwp_rates rates_of(const lwp_window_usage& u, std::uint64_t window_ns)
{
    if (window_ns == 0)
        return {};
    const double window = static_cast<double>(window_ns);
    const double seconds = window / 1e9;
    const std::uint64_t user_ns = user_share_ns(u.grown.cpu_ns, u.grown.utime_ticks, u.grown.stime_ticks);
    auto percent = [&](std::uint64_t ns) { return 100.0 * static_cast<double>(ns) / window; };
    auto per_second = [&](std::uint64_t n) { return static_cast<double>(n) / seconds; };
    return {percent(user_ns),         percent(u.grown.cpu_ns - user_ns), percent(u.grown.wait_ns),
            percent(u.off_ns()),      per_second(u.grown.nvcsw),         per_second(u.grown.nivcsw),
            per_second(u.grown.minflt), per_second(u.grown.majflt)};
}

usage_window::usage_window(procfs::task_files& files, counter_depth depth, const std::vector<tid_t>& lwps,
                           std::size_t named_rows)
    : files_(&files), depth_(depth), named_rows_(named_rows)
{
    // Opened before the first read, so no LWP is charged more than the
    // time it was counted. A base needs no name.
    start_ns_ = monotonic_ns();
    for (tid_t t : lwps)
        if (auto row = read_lwp_counters(*files_, t, depth_, with_name::no))
            live_[t] = base{row->counters, start_ns_, false};
}

bool usage_window::may_rank_at_end(std::uint64_t runnable)
{
    if (named_rows_ == all_named)
        return true;
    // take() lists the ended LWPs after the live ones, in the order they
    // ended, and ranking keeps that order among equals: named_rows_ LWPs that
    // ended before this one, each with at least its time, all rank above it.
    if (ranked_ended_.size() < named_rows_) {
        ranked_ended_.push(runnable);
        return true;
    }
    if (named_rows_ == 0 || runnable <= ranked_ended_.top())
        return false;
    ranked_ended_.pop();
    ranked_ended_.push(runnable);
    return true;
}

void usage_window::name_ranked_live(window_usage& out, std::size_t live)
{
    if (depth_ != counter_depth::times || live == 0)
        return;  // at `full` depth every row has its name from stat
    const auto order = split_rank_order(out);
    const std::size_t ranked = std::min(order.size(), named_rows_);
    for (std::size_t k = 0; k < ranked; ++k)
        if (order[k] < live)
            out.lwps[order[k]].name = files_->comm(out.lwps[order[k]].tid);
}

lwp_window_usage usage_window::share(const base& b, const lwp_counters_row& now, std::uint64_t now_ns) const
{
    lwp_window_usage u;
    u.name = now.comm;
    u.grown = grown_since(now.counters, b.at);
    u.alive_ns = now_ns > b.since_ns ? now_ns - b.since_ns : 0;
    u.born = b.born;
    return u;
}

void usage_window::on_birth(tid_t lwp)
{
    live_[lwp] = base{lwp_counters{}, monotonic_ns(), true};
}

void usage_window::on_death(tid_t lwp)
{
    auto it = live_.find(lwp);
    if (it == live_.end())
        return;
    if (auto row = read_lwp_counters(*files_, lwp, depth_, with_name::no)) {
        auto u = share(it->second, *row, monotonic_ns());
        u.tid = lwp;
        u.ended = true;
        // Read now or never: the task is gone after its exit stop.
        if (depth_ == counter_depth::times && may_rank_at_end(runnable_ns(u)))
            u.name = files_->comm(lwp);
        ended_.push_back(std::move(u));
    }
    live_.erase(it);
}

void usage_window::on_vanished(tid_t lwp)
{
    live_.erase(lwp);
}

void usage_window::on_exec(tid_t former, tid_t leader)
{
    // The kernel keeps the exec'ing task (its counters too) under the
    // leader's TID; the other LWPs' exit stops, if any, came before.
    auto carried = live_.extract(former);
    live_.clear();
    if (!carried.empty()) {
        carried.key() = leader;
        live_.insert(std::move(carried));
    }
}

window_usage usage_window::take(const std::vector<tid_t>& lwps)
{
    window_usage out;
    for (tid_t t : lwps) {
        auto row = read_lwp_counters(*files_, t, depth_, named_rows_ == all_named ? with_name::yes : with_name::no);
        const std::uint64_t now_ns = monotonic_ns();
        if (!row)
            continue;
        auto it = live_.find(t);
        if (it == live_.end()) {
            // Not seen at its birth nor at the start: counted from now on.
            live_[t] = base{row->counters, now_ns, false};
            continue;
        }
        auto u = share(it->second, *row, now_ns);
        u.tid = t;
        out.lwps.push_back(std::move(u));
        it->second = base{row->counters, now_ns, false};
    }
    // Read after every LWP: the window covers each one's alive time.
    const std::uint64_t end_ns = monotonic_ns();
    out.window_ns = end_ns - start_ns_;
    start_ns_ = end_ns;
    const std::size_t live = out.lwps.size();
    for (auto& u : ended_)
        out.lwps.push_back(std::move(u));
    ended_.clear();
    ranked_ended_ = {};
    if (named_rows_ != all_named)
        name_ranked_live(out, live);
    return out;
}

}  // namespace tdctl::core
