#include "core/session/late_reports.hpp"

#include <algorithm>
#include <utility>

#include "base/clock.hpp"
#include "base/log.hpp"

namespace tdctl::core {

void late_reports::settle(const silent_stop_handler& handle)
{
    auto& process = target_.process();
    if (target_.agent() == nullptr || !process.is_alive())
        return;
    births_.set_settling(true);
    births_.drop_pending();  // nothing is newly enabled from here on
    const double start = seconds_since_start();
    run_until_settled(handle);
    log::debug("late reports settled in {:.1f} ms", (seconds_since_start() - start) * 1000);
    // An exit taken meanwhile is reported by the caller from exit_status().
    process.stop_all();
    drain_queued(handle);
    let_creators_push(handle);
    births_.set_settling(false);
    changes_.settled();
}

void late_reports::run_until_settled(const silent_stop_handler& handle)
{
    auto& process = target_.process();
    std::unordered_map<pid_t, std::uint64_t> cpu_before;
    for (tid_t lwp : process.tids())
        if (auto ss = target_.files().schedstat(lwp))
            cpu_before[lwp.value] = ss->cpu_ns;
    if (process.is_holding())
        process.release_all();
    // Still held (a hold of the user's, or one that lingers): no thread runs
    // now, and one that did before the hold is left as it stands.
    if (process.is_holding())
        return;
    const double start = seconds_since_start();
    double next_check = start + settle_seconds;
    for (double now = start; process.is_alive(); now = seconds_since_start()) {
        if (now >= next_check) {
            if (now >= start + settle_max_seconds || all_ran(cpu_before))
                break;
            next_check = now + settle_seconds / 2;
        }
        if (auto ev = process.next_event(std::max(1, static_cast<int>((next_check - now) * 1000))))
            handle(*ev);
    }
}

bool late_reports::all_ran(const std::unordered_map<pid_t, std::uint64_t>& cpu_before)
{
    // A thread in the window may be preempted (R), or in a page fault or
    // inside clone() (D); a thread asleep (S) is not between a decision and
    // its push. A creator stopped at its clone stop is in it too: those are
    // let run alone to their push at the end (let_creators_push).
    auto may_be_in_window = [](char state) { return state == 'R' || state == 'D'; };
    for (tid_t lwp : target_.process().tids()) {
        auto st = target_.files().stat(lwp);
        auto ss = target_.files().schedstat(lwp);
        // One in do_exit (PF_EXITING: a group exit, a fatal signal) runs no
        // code of its own again, whatever its state.
        if (!st || !ss || !may_be_in_window(st->state) || (st->flags & procfs::pf_exiting) != 0)
            continue;
        auto it = cpu_before.find(lwp.value);
        if (it != cpu_before.end() && ss->cpu_ns - it->second < settle_cpu_ns)
            return false;
    }
    return true;
}

void late_reports::let_creators_push(const silent_stop_handler& handle)
{
    // A creator that decided to report pushes its TD_CREATE right after its
    // clone stop: one stopped between the two would push after the detach,
    // onto glibc's list. Each runs alone (the others held) until it stops
    // again, at the site when it reports (the message is taken there).
    auto& process = target_.process();
    for (int round = 0; round < max_creator_rounds && !mid_create_.empty() && process.is_alive(); ++round) {
        auto creators = std::exchange(mid_create_, {});
        for (pid_t creator : creators)
            if (auto ev = process.run_alone(tid_t{creator}, creator_run_ms))
                handle(*ev);
        drain_queued(handle);
    }
    mid_create_.clear();
}

void late_reports::drain_queued(const silent_stop_handler& handle)
{
    auto& process = target_.process();
    while (process.has_queued_events()) {
        auto ev = process.next_event(0);
        if (!ev)
            break;
        handle(*ev);
    }
}

}  // namespace tdctl::core
