// The breakpoint sites of one process image: each physical site
// (breakpoint_site) with the number of reasons it serves and whether its
// bytes are withdrawn for a long hold, and the report signal that stops a
// thread on a signal-stop site instead of a trap byte. traced_process keeps
// one; it lets threads off a site before the site goes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "base/change_journal.hpp"
#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "ptrace/breakpoint_site.hpp"

namespace tdctl::ptrace {

/// The signal reporting code raises to stop for tdctl (traced_process::
/// set_report_signal): signo 0 when none.
struct report_signal_setting {
    int signo = 0;
    target_addr stopped_pc;  ///< the pc of its signal-delivery-stop (the agent's stub)
    target_addr value;       ///< the si_value (SI_QUEUE) that tells it from anyone else's
};

class site_table {
public:
    /// Inserts (or adds a reason to) the site at addr; `function_size` (st_size
    /// of the function there, bytes) lets a one-byte `ret` use resume-in-place.
    /// Throws tdctl::error if the code cannot be read or written.
    const breakpoint_site& add_breakpoint(target_addr addr, std::uint64_t function_size, target_memory& memory,
                                          change_journal& journal);
    /// Inserts (or adds a reason to) a signal-stop site for the reporting
    /// function at addr (its flag written through the journal).
    const breakpoint_site& add_signal_site(target_addr addr, stop_flag flag, target_memory& memory,
                                           change_journal& journal);
    /// Drops one reason of the site at addr. Returns the site when that was
    /// its last one: still in the table, for the caller to let threads off
    /// it, put its bytes back and erase() it. Null otherwise.
    breakpoint_site* drop_reason(target_addr addr);
    void erase(target_addr addr);

    breakpoint_site* find(target_addr addr);
    const breakpoint_site* find(target_addr addr) const;
    /// The site at addr while its bytes are in the target (not withdrawn,
    /// not removed); null otherwise.
    breakpoint_site* inserted_at(target_addr addr);
    /// Every site's address, lowest first.
    std::vector<target_addr> addresses() const;
    std::vector<const breakpoint_site*> all() const;
    bool empty() const { return sites_.empty(); }

    /// The site at addr had its bytes put back for a long hold
    /// (traced_process::withdraw_sites); reinsert_withdrawn() writes them again.
    void mark_withdrawn(target_addr addr);
    /// Writes the withdrawn sites' patches again (journaled first). With
    /// `write` false (the process is gone) only forgets that they were
    /// withdrawn. Throws tdctl::error if the code cannot be written.
    void reinsert_withdrawn(target_memory& memory, change_journal& journal, bool write);
    /// Writes each inserted site's saved bytes into another address space:
    /// a new process's copy of the target's, which is not ours to patch.
    void write_saved_bytes(target_memory& copy) const;
    /// Puts every site's bytes back through the journal and forgets them all.
    void remove_all(change_journal& journal);
    /// Forgets every site, its bytes untouched (the memory is gone).
    void clear() { sites_.clear(); }

    void set_report_signal(const report_signal_setting& s) { report_ = s; }
    const report_signal_setting& report_signal() const { return report_; }
    /// Forgets every site and the report signal: an exec replaced the image
    /// they belonged to (its agent included).
    void forget_image();

private:
    struct entry {
        std::unique_ptr<breakpoint_site> site;
        int reasons = 0;
        bool withdrawn = false;  // bytes put back by a withdrawal
    };
    /// One reason more for the site at addr, if there is one.
    const breakpoint_site* add_reason(target_addr addr);
    /// Inserts a new site with its first reason.
    const breakpoint_site& insert_new(std::unique_ptr<breakpoint_site> site, target_memory& memory,
                                      change_journal& journal);

    std::map<target_addr, entry> sites_;
    report_signal_setting report_;
};

}  // namespace tdctl::ptrace
