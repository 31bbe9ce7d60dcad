// What tdctl changes in the thread library's reporting settings — the global
// event mask, ld.so's initial-report flag, each record's enable flag and
// mask — and what follows from a change: every write is journaled (through
// settings_restore), counted in an epoch (a thread known to report since a
// change reports for sure), and may make a thread push a message after the
// settings go back (so a detach lets late reports settle). At detach the
// messages queued because of these changes are consumed.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_set>

#include <thread_db.h>

#include "base/change_journal.hpp"
#include "base/types.hpp"
#include "core/protocol/settings_restore.hpp"
#include "core/td_result.hpp"
#include "core/thread_agent.hpp"
#include "core/thread_handle.hpp"

namespace tdctl::core {

class report_changes {
public:
    /// A new thread library (or none): what is journaled about the old one
    /// stays in `journal`; the messages listed now are the target's own.
    /// `agent` and `journal` must outlive this binding (until the next bind).
    void bind(thread_agent* agent, change_journal& journal);

    // ---- the td_* writes a user asks for, journaled

    /// td_ta_set_event / td_ta_clear_event. TD_NOLIBTHREAD without a thread library.
    td_status ta_set_event(const td_thr_events_t& events);
    td_status ta_clear_event(const td_thr_events_t& events);
    /// td_thr_set_event / td_thr_clear_event / td_thr_event_enable on one thread.
    td_status thr_set_event(const thread_handle& th, const td_thr_events_t& events);
    td_status thr_clear_event(const thread_handle& th, const td_thr_events_t& events);
    td_status thr_event_enable(const thread_handle& th, bool on);
    /// `event enable on|off` on every thread: kept for a new image.
    void note_enable_all(bool on) { enable_all_ = on; }
    /// After an exec, once the new image's thread library is bound: sets
    /// again the global mask asked for by hand (`event set` less `event
    /// clear`) and, after `event enable on all`, enables reporting on the
    /// new image's threads, as gdb keeps its catchpoints over an exec (a
    /// wrapper script such as a pyenv shim execs the program). Per-thread
    /// masks and enables went with their threads. Returns whether anything
    /// was set.
    bool apply_to_new_image();

    // ---- what a change implies

    /// A mask or flag is about to be written: a new epoch, and a later
    /// detach lets late reports settle.
    void will_write();
    /// A write that changes no running thread's reporting (a thread that
    /// has not run yet enabled, an inherited mask journaled): late reports
    /// may come, but the epoch stays.
    void will_write_quietly() { may_be_pending_ = true; }
    /// Bumped by every change but a newborn's own enabling.
    std::uint64_t epoch() const { return epoch_; }
    /// A new image: every thread's reporting is unknown again.
    void new_epoch() { ++epoch_; }
    /// A thread may have decided to report since the settings last settled.
    bool reports_may_be_pending() const { return may_be_pending_; }
    /// Late reports were let settle.
    void settled() { may_be_pending_ = false; }

    // ---- putting back

    /// Which value each restore puts back; nullptr without a thread library.
    settings_restore* restore() { return restore_ ? &*restore_ : nullptr; }
    /// Writes back every original the session changed; when there were any,
    /// the messages listed from now are ours (consume_our_messages).
    void restore_originals();
    /// Consumes every listed message that was not listed at attach, when the
    /// settings had been changed (those messages exist because of them).
    void consume_our_messages();

private:
    thread_agent* agent_ = nullptr;
    std::optional<settings_restore> restore_;
    std::uint64_t epoch_ = 1;
    bool may_be_pending_ = false;
    // restore_originals() found changes: listed messages are ours to consume.
    bool messages_are_ours_ = false;
    // Records with a buffered message when we came: messages queued later
    // exist because of our changes and are consumed at detach.
    std::unordered_set<target_addr> listed_at_attach_;
    // What the user asked for of every image: apply_to_new_image().
    td_thr_events_t asked_mask_{};
    bool enable_all_ = false;
};

}  // namespace tdctl::core
