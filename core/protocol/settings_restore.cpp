#include "core/protocol/settings_restore.hpp"

#include <unordered_set>

namespace tdctl::core {

namespace {
// The kinds of entry that are thread-library settings.
constexpr std::initializer_list<change_kind> setting_kinds = {
    change_kind::global_mask, change_kind::initial_flag, change_kind::thread_mask, change_kind::thread_enable};
}  // namespace

bool settings_restore::is_mask_changed(target_addr handle) const
{
    return journal_.is_active(event_mask(handle));
}

void settings_restore::inherit_mask(target_addr creator, target_addr born)
{
    auto natural = journal_.original(event_mask(creator));
    auto now = protocol_.read_thread_mask(born);
    if (!natural || !now)
        return;
    // glibc wrote the copy; the record's natural value is the creator's. A
    // new entry: an earlier thread's entry for this record is not this one's.
    journal_.forget(event_mask(born));
    journal_.note(event_mask(born), *natural, std::as_bytes(std::span(now->event_bits)), change_kind::thread_mask,
                  protocol_.record_guard(born));
}

void settings_restore::restore_exiting(target_addr handle)
{
    // Only the flag goes back: glibc overwrites a reused record's whole event
    // buffer (mask included) from its creator, but not the flag.
    journal_.settle(enable_flag(handle), true);
    journal_.settle(event_mask(handle), false);
}

bool settings_restore::has_active_change(target_addr handle) const
{
    return journal_.is_active(enable_flag(handle)) || journal_.is_active(event_mask(handle));
}

bool settings_restore::restore_originals()
{
    bool changed = journal_.has_active(setting_kinds);
    journal_.restore_kinds(setting_kinds);
    return changed;
}

void settings_restore::mark_before_arm()
{
    journal_.set_mark();
}

void settings_restore::note_born(target_addr handle)
{
    journal_.settle(enable_flag(handle), false);
}

void settings_restore::restore_before_arm()
{
    if (!journal_.has_mark())
        return;
    // Only records of live threads: a dead thread's record may be reused memory.
    std::unordered_set<target_addr> live_flags;
    if (auto records = protocol_.thread_records())
        for (target_addr rec : *records)
            live_flags.insert(enable_flag(rec));
    journal_.restore_to_mark({change_kind::global_mask, change_kind::initial_flag, change_kind::thread_enable},
                             [&](target_addr address) {
                                 // The global mask and the initial flag are no record's.
                                 return address == protocol_.layout().global_mask ||
                                        address == protocol_.layout().initial_report_events ||
                                        live_flags.contains(address);
                             });
}

}  // namespace tdctl::core
