#include "core/accounting/stats_collector.hpp"

#include <algorithm>
#include <climits>
#include <optional>
#include <time.h>

#include "ptrace/procfs.hpp"

namespace tdctl::core {

std::uint64_t monotonic_ns()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

void reduce_to_int(std::uint64_t num, std::uint64_t den, int& out_num, int& out_den)
{
    while (num > static_cast<std::uint64_t>(INT_MAX) || den > static_cast<std::uint64_t>(INT_MAX)) {
        num >>= 1;
        den >>= 1;
    }
    out_num = static_cast<int>(num);
    out_den = static_cast<int>(den);
}

void stats_collector::start_window(const std::vector<tid_t>& lwps)
{
    live_.clear();
    dead_ = {};
    frozen_ = {};
    reported_ = {};
    // The window opens before the first reading and each reading is at or
    // after it, so no LWP is charged more CPU than the time it was counted.
    process_cpu0_ns_ = files_->process_cpu_ns();
    t0_ns_ = monotonic_ns();
    for (tid_t t : lwps)
        if (auto st = files_->schedstat(t))
            live_[t] = base{st->cpu_ns, st->wait_ns, t0_ns_};
}

void stats_collector::enable(bool on, const std::vector<tid_t>& lwps)
{
    if (on) {
        enabled_ = true;
        start_window(lwps);
        return;
    }
    if (!enabled_)
        return;
    frozen_ = current(lwps);
    enabled_ = false;
    live_.clear();
}

void stats_collector::reset(const std::vector<tid_t>& lwps)
{
    if (enabled_) {
        start_window(lwps);
    } else {
        live_.clear();
        dead_ = {};
        frozen_ = {};
        reported_ = {};
    }
}

void stats_collector::on_birth(tid_t lwp)
{
    if (!enabled_)
        return;
    std::uint64_t since = monotonic_ns();
    if (auto st = files_->schedstat(lwp))
        live_[lwp] = base{st->cpu_ns, st->wait_ns, since};
}

void stats_collector::on_death(tid_t lwp)
{
    if (!enabled_)
        return;
    // Its CPU and wait time while it can still be read; then as if gone.
    if (auto it = live_.find(lwp); it != live_.end())
        if (auto st = files_->schedstat(lwp)) {
            dead_.cpu_ns += st->cpu_ns - it->second.cpu_ns;
            dead_.wait_ns += st->wait_ns - it->second.wait_ns;
        }
    on_vanished(lwp);
}

void stats_collector::on_vanished(tid_t lwp)
{
    if (!enabled_)
        return;
    auto it = live_.find(lwp);
    if (it == live_.end())
        return;
    dead_.alive_ns += monotonic_ns() - it->second.since_ns;
    live_.erase(it);
}

void stats_collector::on_exec(tid_t former, tid_t leader)
{
    if (!enabled_)
        return;
    // The kernel keeps the exec'ing task (and its schedstat) and gives it the
    // leader's TID; the old leader's task is released.
    std::optional<base> carried;
    if (auto it = live_.find(former); it != live_.end()) {
        carried = it->second;
        live_.erase(it);
    }
    if (former != leader)
        on_vanished(leader);
    std::vector<tid_t> rest;
    for (const auto& [t, b] : live_)
        rest.push_back(t);
    for (tid_t t : rest)
        on_vanished(t);
    if (carried)
        live_[leader] = *carried;
    else
        on_birth(leader);
}

stats_collector::sums stats_collector::current(const std::vector<tid_t>& lwps)
{
    sums s = dead_;
    for (tid_t t : lwps) {
        auto it = live_.find(t);
        if (it == live_.end())
            continue;
        if (auto st = files_->schedstat(t)) {
            s.cpu_ns += st->cpu_ns - it->second.cpu_ns;
            s.wait_ns += st->wait_ns - it->second.wait_ns;
        }
    }
    // The process clock also counts what LWPs spent after their exit stop.
    if (process_cpu0_ns_)
        if (auto cpu = files_->process_cpu_ns(); cpu && *cpu >= *process_cpu0_ns_)
            s.cpu_ns = *cpu - *process_cpu0_ns_;
    // Read after every sample: each LWP's alive time covers its CPU time.
    std::uint64_t now = monotonic_ns();
    for (tid_t t : lwps)
        if (auto it = live_.find(t); it != live_.end())
            s.alive_ns += now - it->second.since_ns;
    s.window_ns = now - t0_ns_;
    return settle(s);
}

stats_collector::sums stats_collector::settle(sums raw)
{
    // The kernel's accounting lags: CPU time of a running task is brought up
    // to date at ticks and switches, and a run-queue wait is charged only when
    // it ends (possibly with time from before the window). Report, within the
    // window, integrals that never decrease and always satisfy
    // cpu <= runnable <= alive, moving toward the raw values as they settle.
    sums out = raw;
    std::uint64_t alive = std::max(raw.alive_ns, reported_.alive_ns);
    std::uint64_t idle_before = reported_.alive_ns - (reported_.cpu_ns + reported_.wait_ns);
    std::uint64_t runnable_before = reported_.cpu_ns + reported_.wait_ns;
    std::uint64_t runnable = std::clamp(raw.cpu_ns + raw.wait_ns, runnable_before, alive - idle_before);
    std::uint64_t cpu = std::clamp(raw.cpu_ns, reported_.cpu_ns, runnable);
    out.alive_ns = alive;
    out.cpu_ns = cpu;
    out.wait_ns = runnable - cpu;
    reported_ = out;
    return out;
}

stat_averages stats_collector::to_averages(const sums& s)
{
    stat_averages a;
    std::uint64_t runnable = s.cpu_ns + s.wait_ns;
    a.a_concurrency = {s.cpu_ns, s.window_ns};
    a.nrunnable = {runnable, s.window_ns};
    a.nlwps = {s.alive_ns, s.window_ns};
    a.nidle = {s.alive_ns > runnable ? s.alive_ns - runnable : 0, s.window_ns};
    a.window_seconds = static_cast<double>(s.window_ns) / 1e9;
    return a;
}

stat_averages stats_collector::averages(const std::vector<tid_t>& lwps)
{
    return to_averages(enabled_ ? current(lwps) : frozen_);
}

}  // namespace tdctl::core
