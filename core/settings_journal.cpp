#include "core/settings_journal.hpp"

namespace tdctl::core {

void settings_journal::note_global_mask()
{
    if (global_original_)
        return;
    if (auto m = protocol_.read_global_mask())
        global_original_ = *m;
}

bool settings_journal::note_record(target_addr handle, unsigned fields)
{
    if (handle.is_null()) {
        if (!initial_original_)
            if (auto v = protocol_.read_initial_report_events())
                initial_original_ = *v;
        return true;
    }
    if (!natural_.contains(handle)) {
        auto on = protocol_.read_report_events(handle);
        auto mask = protocol_.read_thread_mask(handle);
        if (!on || !mask)
            return false;
        natural_[handle] = record_state{*on, *mask};
    }
    changed_[handle] |= fields;
    return true;
}

bool settings_journal::is_mask_changed(target_addr handle) const
{
    auto it = changed_.find(handle);
    return it != changed_.end() && (it->second & record_mask) != 0;
}

void settings_journal::inherit_mask(target_addr creator, target_addr born)
{
    if (!note_record(born, record_mask))
        return;
    natural_[born].mask = natural_[creator].mask;
}

void settings_journal::restore_record(target_addr handle, unsigned fields)
{
    auto it = natural_.find(handle);
    if (it == natural_.end())
        return;
    // Back to the record's own value, which the change journal then forgets:
    // the record may go to glibc's cache and serve another thread.
    if (fields & record_enable) {
        (void)protocol_.write_report_events(handle, it->second.report_events);
        journal_.forget(handle + protocol_.layout().report_events.offset);
    }
    if (fields & record_mask) {
        (void)protocol_.write_thread_mask(handle, it->second.mask);
        journal_.forget(handle + protocol_.layout().eventmask.offset);
    }
}

void settings_journal::restore_exiting(target_addr handle)
{
    // Only the enable flag matters: glibc overwrites a reused record's whole
    // event buffer (mask included) from its creator, but not the flag.
    auto it = changed_.find(handle);
    if (it == changed_.end())
        return;
    restore_record(handle, it->second & record_enable);
    changed_.erase(it);
    if (before_arm_)
        before_arm_->enable.erase(handle);
}

std::unordered_set<target_addr> settings_journal::live_records()
{
    std::unordered_set<target_addr> live;
    if (auto records = protocol_.thread_records())
        live.insert(records->begin(), records->end());
    return live;
}

bool settings_journal::restore_originals()
{
    bool changed = global_original_ || initial_original_ || !changed_.empty();
    if (global_original_)
        (void)protocol_.write_global_mask(*global_original_);
    if (initial_original_)
        (void)protocol_.write_initial_report_events(*initial_original_);
    // Only records of live threads: a dead thread's record may be reused memory.
    auto live = live_records();
    for (const auto& [handle, fields] : changed_)
        if (live.contains(handle))
            restore_record(handle, fields);
    // What is left: records of threads that are gone (their guard no longer
    // holds) and values already back.
    journal_.restore_kinds({change_kind::global_mask, change_kind::initial_flag, change_kind::thread_mask,
                            change_kind::thread_enable});
    global_original_.reset();
    initial_original_.reset();
    changed_.clear();
    return changed;
}

void settings_journal::begin_arm(const td_thr_events_t& global)
{
    before_arm_ = arm_point{};
    before_arm_->global = global;
}

bool settings_journal::note_before_arm(target_addr handle)
{
    if (!before_arm_)
        return false;
    if (before_arm_->enable.contains(handle))
        return true;
    auto before = protocol_.read_report_events(handle);
    if (!before)
        return false;
    before_arm_->enable[handle] = *before;
    return true;
}

void settings_journal::note_born_before_arm(target_addr handle)
{
    if (before_arm_)
        before_arm_->enable[handle] = natural_[handle].report_events;
}

void settings_journal::note_initial_before_arm()
{
    if (!before_arm_)
        return;
    if (auto v = protocol_.read_initial_report_events())
        before_arm_->initial = *v;
}

void settings_journal::restore_before_arm()
{
    if (!before_arm_)
        return;
    (void)protocol_.write_global_mask(before_arm_->global);
    auto live = live_records();
    for (const auto& [handle, before] : before_arm_->enable)
        if (live.contains(handle))
            (void)protocol_.write_report_events(handle, before);
    if (before_arm_->initial)
        (void)protocol_.write_initial_report_events(*before_arm_->initial);
    before_arm_.reset();
}

}  // namespace tdctl::core
