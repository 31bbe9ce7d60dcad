// Letting late reports settle before the sites go (disarm, detach). glibc
// decides to report before it reports: a creator decides before its clone()
// and pushes the message after it, a dying thread a few instructions before
// its push. A thread inside that window when the masks and flags go back
// still pushes its message. So the threads run a while longer with the
// sites in place (and nothing newly enabled), and each late message is taken
// at its site, not left on glibc's list for after the detach.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "base/types.hpp"
#include "core/session/birth_policy.hpp"
#include "core/session/live_target.hpp"
#include "core/session/report_changes.hpp"
#include "ptrace/traced_process.hpp"

namespace tdctl::core {

/// Handles one stop silently (the session's dispatch: nothing is shown).
using silent_stop_handler = std::function<void(const ptrace::stop_event&)>;

class late_reports {
public:
    /// All three must outlive this.
    late_reports(live_target& target, birth_policy& births, report_changes& changes)
        : target_(target), births_(births), changes_(changes)
    {
    }

    /// With the settings back and the sites still planted, lets the threads
    /// run (released first if a hold lingers) until every runnable one has
    /// had settle_cpu_ns of CPU (at most settle_max_seconds), each stop
    /// handed to `handle`; then lets each creator caught between its clone
    /// and its push run alone to its push. Returns with every thread held.
    void settle(const silent_stop_handler& handle);
    /// Hands every stop already queued to `handle`.
    void drain_queued(const silent_stop_handler& handle);

    /// A clone stop of `creator`: while settling it may be about to push.
    void on_clone(tid_t creator)
    {
        if (births_.is_settling())
            mid_create_.insert(creator.value);
    }
    /// `tid` stopped at a site: its push, if any, is taken.
    void on_site(tid_t tid) { mid_create_.erase(tid.value); }

private:
    /// The threads run until all_ran() says so, or the bound.
    void run_until_settled(const silent_stop_handler& handle);
    /// Every thread that may be in the window (R or D) has had settle_cpu_ns
    /// of CPU since `cpu_before` (schedstat).
    bool all_ran(const std::unordered_map<pid_t, std::uint64_t>& cpu_before);
    /// Runs each creator seen at a clone stop while settling, and not at a
    /// site since, alone until it stops again (its push taken at the site).
    void let_creators_push(const silent_stop_handler& handle);

    live_target& target_;
    birth_policy& births_;
    report_changes& changes_;
    // Creators seen at a clone stop while settling and not at a site since (TIDs).
    std::unordered_set<pid_t> mid_create_;

    // How long the threads run between two looks, s: far longer than the
    // few hundred instructions and one clone() between glibc's decision to
    // report and its push, bounded so a detach stays quick.
    static constexpr double settle_seconds = 0.02;
    // ... until each runnable thread has had this much CPU, ns ...
    static constexpr std::uint64_t settle_cpu_ns = 200000;
    // ... but never longer than this, s (0.5 s ran out in 7 of 100 detaches
    // on a storm with two CPUs and a load of ~20: a glibc list entry left).
    static constexpr double settle_max_seconds = 2.0;
    // How long each creator may run alone to its push, ms, in at most so
    // many rounds (a creator may clone again meanwhile).
    static constexpr int creator_run_ms = 20;
    static constexpr int max_creator_rounds = 3;
};

}  // namespace tdctl::core
