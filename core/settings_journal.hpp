// What the session changed in the thread library's settings — the global
// event mask, ld.so's initial-report flag, each record's enable flag and
// mask — and the values to put back: the session's originals (for detach)
// and the values from before `arm` (for disarm). The bytes themselves go
// through base/change_journal (event_protocol::set_journal); this is the one
// place that knows which value each restore wants.
#pragma once

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <thread_db.h>

#include "base/change_journal.hpp"
#include "base/types.hpp"
#include "core/event_protocol.hpp"

namespace tdctl::core {

/// Which fields of a thread record were changed (bits).
enum record_field : unsigned { record_enable = 1, record_mask = 2 };

class settings_journal {
public:
    /// `protocol` writes the target's settings, `journal` records each write;
    /// both must outlive this.
    settings_journal(event_protocol& protocol, change_journal& journal) : protocol_(protocol), journal_(journal) {}

    // ---- the session's originals (detach puts them back)

    /// Remembers the global mask before the session's first write to it.
    void note_global_mask();
    /// Remembers a record's natural flag and mask before the first write to
    /// it, and that `fields` are about to change. A null handle stands for
    /// the initial-report flag. False when the record cannot be read.
    bool note_record(target_addr handle, unsigned fields);
    /// True when the session changed the record's mask and has not put it back.
    bool is_mask_changed(target_addr handle) const;
    /// A new thread whose creator's mask we changed starts with a copy of it:
    /// its natural mask is the creator's. Notes `born`'s mask as changed;
    /// nothing when `born` cannot be read.
    void inherit_mask(target_addr creator, target_addr born);

    /// A thread is exiting: its record's flag goes back to the natural value
    /// (the record may serve the next thread) and is no longer changed.
    void restore_exiting(target_addr handle);
    /// Writes back the global mask, the initial-report flag and the flags and
    /// masks of live records (on the thread lists now), then lets the change
    /// journal restore what is left. Returns whether anything had been changed.
    bool restore_originals();

    // ---- the values from before arm (disarm puts them back)

    /// Starts a new arm with the global mask `global` read before it.
    void begin_arm(const td_thr_events_t& global);
    /// Remembers a record's flag before arm enables it, unless already
    /// remembered. False when it cannot be read.
    bool note_before_arm(target_addr handle);
    /// A thread born now: its flag before arm is its record's natural value,
    /// not what a dead thread left in it (the record must have been noted).
    void note_born_before_arm(target_addr handle);
    /// Remembers the initial-report flag before arm sets it.
    void note_initial_before_arm();
    /// Writes back the global mask, the initial flag and the flags of live
    /// records as they were before arm; the arm is over.
    void restore_before_arm();

private:
    void restore_record(target_addr handle, unsigned fields);
    /// Records on the live-thread lists now (empty when they cannot be read).
    std::unordered_set<target_addr> live_records();

    event_protocol& protocol_;
    change_journal& journal_;

    struct record_state {
        bool report_events = false;
        td_thr_events_t mask{};
    };
    // Session originals, kept since the first write.
    std::optional<td_thr_events_t> global_original_;
    std::optional<bool> initial_original_;
    // What every record we wrote held before our first write, kept for the
    // whole session: glibc reuses a dead thread's record (its stack) for a new
    // thread without resetting the enable flag, so a value read at a later
    // birth may be our own leftover.
    std::unordered_map<target_addr, record_state> natural_;
    // Live records whose flag or mask we changed: restored when the thread
    // exits (so its cached record is clean for the next thread) or at detach.
    std::unordered_map<target_addr, unsigned> changed_;   // record -> record_field bits

    // Values from before the current arm.
    struct arm_point {
        td_thr_events_t global{};
        std::unordered_map<target_addr, bool> enable;   // handle -> report_events before arm
        std::optional<bool> initial;
    };
    std::optional<arm_point> before_arm_;
};

}  // namespace tdctl::core
