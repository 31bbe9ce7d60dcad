// The traced process's breakpoints as its owner plants them: trap-byte
// sites and signal-stop sites, the report signal, and the withdrawal of
// every site for a long hold. A part of traced_process (reached as
// process.sites()); it keeps the site_table the wait loop reads hits from
// and lets threads off a site (stepper) before the site's bytes go.
#pragma once

#include <cstdint>

#include "base/change_journal.hpp"
#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "ptrace/breakpoint_site.hpp"
#include "ptrace/site_table.hpp"

namespace tdctl::ptrace {

class stepper;

/// Every write goes through the journal first (base/change_journal.hpp).
/// Made once the target's memory is open (traced_process::open_memory);
/// when the process is gone its sites are forgotten, so each call below is
/// then a no-op that writes nothing.
class breakpoints {
public:
    breakpoints(site_table& sites, target_memory& memory, change_journal& journal, stepper& steps);

    /// Inserts (or adds a reason to) the site at addr; `function_size` (st_size
    /// of the function there, bytes; 0 when unknown) lets a one-byte `ret`
    /// use resume-in-place (breakpoint_site.hpp). Throws tdctl::error if the
    /// code cannot be read or written.
    const breakpoint_site& add(target_addr addr, std::uint64_t function_size);
    /// Inserts (or adds a reason to) a signal-stop site for the reporting
    /// function at addr (breakpoint_site's stop_flag). Stops of that signal
    /// are recognised once set_report_signal() named it.
    const breakpoint_site& add_signal_site(target_addr addr, stop_flag flag);
    /// Names the signal reporting code raises to stop for tdctl: `signo`,
    /// the pc of its signal-delivery-stop (libtdagent.so's
    /// __tdagent_report_stopped) and the si_value (SI_QUEUE) that tells it
    /// from the same signal sent by anyone else. Cleared by an exec.
    void set_report_signal(int signo, target_addr stopped_pc, target_addr value)
    {
        sites_.set_report_signal({signo, stopped_pc, value});
    }
    /// The signal set_report_signal() named (0: none).
    int report_signal() const { return sites_.report_signal().signo; }
    /// Drops one reason of the site at addr; the last one puts its bytes
    /// back, a thread stopped on it moved off first. Call with every task
    /// stopped (a hold), so that no thread is between its trap and its report.
    void remove(target_addr addr);
    /// The site at addr, null when there is none.
    const breakpoint_site* at(target_addr addr) const { return sites_.find(addr); }
    /// Every site, lowest address first.
    std::vector<const breakpoint_site*> all() const { return sites_.all(); }

    /// For a hold that may last (a `stop` hit or an `interrupt` the user
    /// looks at): moves every task out of a SIGTRAP stop of ours
    /// (stepper::park_trap_stops), then puts every site's original bytes
    /// back through the journal (threads on a patch's `ret` are moved past it
    /// first), keeping the sites and their reasons. Were the tracer to die
    /// now, the threads it lets go would carry no SIGTRAP and meet no trap
    /// byte. Call with every task stopped; reinsert_withdrawn() undoes it.
    void withdraw_all();
    /// Writes the withdrawn sites' patches again (journaled first); before
    /// the hold ends. Throws tdctl::error if the code cannot be written.
    void reinsert_withdrawn();

private:
    site_table& sites_;
    target_memory& memory_;
    change_journal& journal_;
    stepper& steps_;
};

}  // namespace tdctl::ptrace
