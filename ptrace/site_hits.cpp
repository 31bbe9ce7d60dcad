#include "ptrace/site_hits.hpp"

#include <csignal>

#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

std::optional<stop_event> hit_by_trap(task& t, site_table& sites)
{
    auto regs = registers::read(t.tid());
    if (!regs) {
        t.note_resumed();  // vanished (SIGKILL); its exit status follows
        return std::nullopt;
    }
    target_addr at = regs->pc() - breakpoint_pc_adjust;
    if (sites.inserted_at(at) == nullptr)
        return std::nullopt;  // not (or no longer) ours: a real SIGTRAP
    t.hit = trap_hit{at, false, *regs};
    stop_event ev{stop_kind::breakpoint, t.tid(), {}, at, 0};
    ev.arg0 = regs->arg0();
    return ev;
}

std::optional<stop_event> hit_before_interrupt(task& t, site_table& sites)
{
    if (sites.empty() || t.hit)
        return std::nullopt;
    auto regs = registers::read(t.tid());
    if (!regs)
        return std::nullopt;
    target_addr at = regs->pc() - breakpoint_pc_adjust;
    // pc one past an inserted site is reachable only through its trap byte:
    // the site holds a `ret` or the first byte of a longer instruction.
    if (sites.inserted_at(at) == nullptr)
        return std::nullopt;
    // pc one past a site is also where a thread resumed in place sits before
    // its `ret`: only a trap's SIGTRAP still queued for the thread tells.
    if (!has_queued_trap(t.tid()))
        return std::nullopt;
    t.hit = trap_hit{at, false, *regs};
    t.sigtrap_owed = true;
    stop_event ev{stop_kind::breakpoint, t.tid(), {}, at, 0};
    ev.arg0 = regs->arg0();
    return ev;
}

report_stop hit_by_report_signal(task& t, site_table& sites, std::optional<stop_event>& ev)
{
    auto regs = registers::read(t.tid());
    if (!regs) {
        t.note_resumed();  // vanished (SIGKILL); its exit status follows
        return report_stop::vanished;
    }
    // Only the agent's stub stops there with this signal queued by itself:
    // anything else is somebody's signal, delivered as usual.
    const report_signal_setting& report = sites.report_signal();
    if (regs->pc() != report.stopped_pc)
        return report_stop::not_ours;
    // The program may have been sent the same signal (it may even catch it
    // by now): only the agent's own carries its value.
    siginfo_t info{};
    if (ptrace_call(PTRACE_GETSIGINFO, t.tid(), nullptr, &info) != 0 || info.si_code != SI_QUEUE ||
        reinterpret_cast<std::uint64_t>(info.si_value.sival_ptr) != report.value.value)
        return report_stop::not_ours;
    target_addr at{regs->arg4()};
    if (const breakpoint_site* site = sites.inserted_at(at);
        site == nullptr || site->kind() != step_over_kind::signal_stop)
        return report_stop::dropped;  // raised just before its flag went back to 0
    // Seen from above, the thread is where a trap byte would have left it:
    // one byte into the reporting function, its return address on top of the
    // stack (the stub is a leaf and touched no stack), the subject record as
    // the function's argument. Stacks and step-over code need no second case.
    ev = stop_event{stop_kind::breakpoint, t.tid(), {}, at, 0};
    ev->arg0 = regs->arg5();
    regs->set_pc(at + breakpoint_pc_adjust);
    t.hit = trap_hit{at, true, *regs};
    return report_stop::hit;
}

bool has_queued_trap(tid_t tid)
{
    // The thread's private queue (no PTRACE_PEEKSIGINFO_SHARED): a trap
    // byte's SIGTRAP is sent to the thread with si_code SI_KERNEL.
    siginfo_t pending[16];
    __ptrace_peeksiginfo_args args{0, 0, 16};
    long n = 0;
    if (ptrace_call(PTRACE_PEEKSIGINFO, tid, &args, pending, &n) != 0 || n <= 0)
        return false;
    for (long i = 0; i < n; ++i)
        if (pending[i].si_signo == SIGTRAP && pending[i].si_code == SI_KERNEL)
            return true;
    return false;
}

}  // namespace tdctl::ptrace
