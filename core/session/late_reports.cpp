#include "core/session/late_reports.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include <sys/syscall.h>

#include "base/clock.hpp"
#include "base/log.hpp"
#include "ptrace/registers_x86_64.hpp"

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
    let_window_threads_pass(handle);
    births_.set_settling(false);
    changes_.settled();
}

void late_reports::run_until_settled(const silent_stop_handler& handle)
{
    auto& process = target_.process();
    threads_ran_ = false;
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
    threads_ran_ = true;
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
        constexpr unsigned pf_exiting = 0x4;
        if (!st || !ss || !may_be_in_window(st->state) || (st->flags & pf_exiting) != 0)
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

void late_reports::let_window_threads_pass(const silent_stop_handler& handle)
{
    auto& process = target_.process();
    if (!threads_ran_ || !process.is_alive())
        return;
    int passed = 0;
    for (tid_t lwp : process.tids()) {
        const ptrace::task* t = process.tasks().find(lwp);
        if (t == nullptr || t->needs_owner || t->in_group_stop || !ptrace::is_live_stop(t->state()) ||
            syscall_of_stop(lwp))
            continue;
        pass_to_syscall(lwp, handle);
        ++passed;
    }
    drain_queued(handle);
    if (passed != 0)
        log::debug("late reports: {} threads outside a system call run alone to their next one", passed);
}

void late_reports::pass_to_syscall(tid_t tid, const silent_stop_handler& handle)
{
    auto& process = target_.process();
    const auto cpu_at = [&] { return target_.files().schedstat(tid).value_or(procfs::schedstat_info{}).cpu_ns; };
    const std::uint64_t cpu_start = cpu_at();
    int stops = 0;
    for (int waited = 0; waited < window_pass_max_ms && stops < window_pass_max_stops;
         waited += window_pass_slice_ms) {
        const ptrace::task* t = process.tasks().find(tid);
        if (t == nullptr || !ptrace::is_live_stop(t->state()))
            return;  // gone, or at its end
        if (auto ev = process.run_alone(tid, window_pass_slice_ms, true)) {
            ++stops;
            if (ev->kind == ptrace::stop_kind::breakpoint)
                log::debug("late reports: thread {} stopped at a site on its way to a system call", tid.value);
            handle(*ev);  // its report at the site, a clone, its exit
            continue;
        }
        t = process.tasks().find(tid);
        if (t == nullptr || !ptrace::is_live_stop(t->state()))
            return;
        if (t->pending_signal != 0) {
            ++stops;  // a signal came first: delivered on the next run
            continue;
        }
        if (auto nr = syscall_of_stop(tid)) {
            // A creator's clone() is inside its window: its clone stop, the
            // call's end and its push are still to come.
            if (*nr == SYS_clone || *nr == SYS_clone3) {
                ++stops;
                continue;
            }
            return;  // at its next system call: out of any window
        }
        if (cpu_at() - cpu_start >= window_pass_cpu_ns)
            return;  // spins without one: no window is that long
    }
    log::debug("late reports: thread {} reached no system call ({} stops)", tid.value, stops);
}

std::optional<long> late_reports::syscall_of_stop(tid_t tid)
{
    auto regs = ptrace::registers::read(tid);
    if (!regs || regs->syscall_number() < 0)
        return std::nullopt;
    std::array<std::byte, 2> insn{};
    if (target_.memory().read(regs->pc() - 2, insn) != insn.size() || insn[0] != std::byte{0x0f} ||
        insn[1] != std::byte{0x05})
        return std::nullopt;
    return regs->syscall_number();
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
