// Which value each restore of the thread library's settings puts back — the
// global event mask, ld.so's initial-report flag, each record's enable flag
// and mask — read from the change journal (base/change_journal.hpp), which
// holds every value: detach and a thread's exit put back an entry's original
// (the natural value, kept for the whole session: glibc hands a dead
// thread's record to a new thread without resetting its enable flag), and
// disarm the value an entry had at the mark `arm` set. The bytes go through
// the journal too (event_protocol::set_journal). This holds no values.
#pragma once

#include "base/change_journal.hpp"
#include "base/types.hpp"
#include "core/protocol/event_protocol.hpp"

namespace tdctl::core {

class settings_restore {
public:
    /// `protocol` reads and writes the target's settings, `journal` holds
    /// every change to them; both must outlive this.
    settings_restore(event_protocol& protocol, change_journal& journal) : protocol_(protocol), journal_(journal) {}

    // ---- the naturals (detach and a thread's exit put them back)

    /// True while the session's change to the record's mask stands (not put
    /// back, its thread not exited).
    bool is_mask_changed(target_addr handle) const;
    /// A new thread whose creator's mask we changed starts with a copy of it:
    /// journals `born`'s mask as changed, with the creator's natural mask as
    /// its own. Nothing when either cannot be read.
    void inherit_mask(target_addr creator, target_addr born);
    /// A thread is exiting: its record's flag goes back to the natural value
    /// (the record may serve the next thread), and the changes to the record
    /// are over.
    void restore_exiting(target_addr handle);
    /// Whether tdctl's change to `handle`'s record (its flag or mask) is
    /// still active: what restore_exiting() would put back. No system call.
    bool has_active_change(target_addr handle) const;
    /// Puts back the originals of the global mask, the initial-report flag
    /// and every record's flag and mask the session changed, where the bytes
    /// and the record's guard allow. Returns whether anything had been changed.
    bool restore_originals();

    // ---- the values from before arm (disarm puts them back)

    /// `arm` starts: the values from now are what restore_before_arm() puts back.
    void mark_before_arm();
    /// A thread is born on `handle`'s record: whatever a dead thread left in
    /// its flag is over, so its value before arm is the natural one.
    void note_born(target_addr handle);
    /// Writes back the global mask, the initial flag and the flags of live
    /// records (on the thread lists now) as they were at the mark; the arm is over.
    void restore_before_arm();

private:
    target_addr enable_flag(target_addr handle) const { return handle + protocol_.layout().report_events.offset; }
    target_addr event_mask(target_addr handle) const { return handle + protocol_.layout().eventmask.offset; }

    event_protocol& protocol_;
    change_journal& journal_;
};

}  // namespace tdctl::core
