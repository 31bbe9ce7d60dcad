// Telling a stop of a task that executed one of our sites from any other
// stop: a trap byte's SIGTRAP, the same trap met through an interrupt first,
// and the agent's report signal. Each sets the task's hit (task::hit) and
// gives the breakpoint stop the owner sees.
#pragma once

#include <optional>

#include "ptrace/site_table.hpp"
#include "ptrace/task.hpp"
#include "ptrace/stop_event.hpp"

namespace tdctl::ptrace {

/// A SIGTRAP signal-delivery-stop of t: the hit of the inserted site just
/// before its pc; std::nullopt when no site of ours is there (a real
/// SIGTRAP, passed on), or t vanished (then marked running: its exit status
/// follows).
std::optional<stop_event> hit_by_trap(task& t, site_table& sites);

/// A PTRACE_EVENT_STOP of t: the kernel reports a pending interrupt before
/// a queued signal, so a thread that had just executed a trap byte shows up
/// here, past the site, with the trap's SIGTRAP still queued (then it is a
/// hit, and that SIGTRAP is owed: task::sigtrap_owed). std::nullopt for any
/// other event stop.
std::optional<stop_event> hit_before_interrupt(task& t, site_table& sites);

/// What a stop of the report signal was (site_table::report_signal()).
enum class report_stop {
    not_ours,   ///< somebody else's signal: delivered as usual
    dropped,    ///< ours, raised as its site's flag went back to 0: resume without it
    vanished,   ///< t is gone (marked running: its exit status follows)
    hit,        ///< a hit of a signal-stop site
};

/// A signal-delivery-stop of t for the report signal: whether the agent's
/// stub raised it (its pc and si_value), and for a live signal-stop site
/// the hit, with t's registers shown as a trap byte would have left them
/// (pc one byte into the reporting function, r9 the argument) in `ev`.
report_stop hit_by_report_signal(task& t, site_table& sites, std::optional<stop_event>& ev);

/// Whether a trap byte's SIGTRAP (SI_KERNEL) is queued for tid alone
/// (PTRACE_PEEKSIGINFO of its private queue).
bool has_queued_trap(tid_t tid);

}  // namespace tdctl::ptrace
