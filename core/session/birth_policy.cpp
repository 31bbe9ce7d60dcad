#include "core/session/birth_policy.hpp"

#include "core/protocol/thread_backend.hpp"

namespace tdctl::core {

void birth_policy::on_clone(tid_t creator, tid_t child, const watch_mode& mode)
{
    inherit_mask(creator, child);
    reporting_since_.erase(child);  // a TID used again starts unknown
    // While watching every new thread is enabled; while a `stop` waits, one
    // whose creator reports (glibc does not pass the flag on). A creator
    // known to report its creates has the new thread enabled at that report.
    const thread_backend* backend = target_.backend();
    if (backend == nullptr || backend->traits().enable_on_birth != birth_enable::at_clone_stop || settling_)
        return;
    if (!mode.armed && !(mode.stops && creator_reports(creator)))
        return;
    if (enables_at_report(mode) && creates_are_reported_by(creator)) {
        births_at_report_[child] = creator;
        return;
    }
    bool enabled = enable_born_at_clone(child, mode);
    if (enables_at_report(mode)) {
        if (enabled)
            reporting_since_[child] = changes_.epoch();
        // Its next pthread_create starts after this clone: sure to report.
        if (creator_reports(creator))
            reporting_since_[creator] = changes_.epoch();
    }
}

void birth_policy::after_create_report(tid_t child, bool flag_changed, const watch_mode& mode)
{
    auto it = births_at_report_.find(child);
    if (it == births_at_report_.end())
        return;
    births_at_report_.erase(it);
    if (flag_changed)
        reporting_since_[child] = changes_.epoch();
    else
        (void)enable_born_at_clone(child, mode);
}

void birth_policy::enable_pending(const watch_mode& mode, tid_t creator)
{
    for (auto it = births_at_report_.begin(); it != births_at_report_.end();) {
        if (creator.value != 0 && it->second != creator) {
            ++it;
            continue;
        }
        tid_t child = it->first;
        it = births_at_report_.erase(it);
        (void)enable_born_at_clone(child, mode);
    }
}

void birth_policy::on_exit(tid_t lwp, const watch_mode& mode)
{
    forget(lwp);
    enable_pending(mode, lwp);
}

bool birth_policy::enables_at_report(const watch_mode& mode) const
{
    const thread_backend* backend = target_.backend();
    return mode.armed && !mode.stops && !settling_ && backend != nullptr &&
           backend->traits().enable_on_birth == birth_enable::at_clone_stop && mode.creates_reported;
}

bool birth_policy::creates_are_reported_by(tid_t creator) const
{
    auto it = reporting_since_.find(creator);
    return it != reporting_since_.end() && it->second == changes_.epoch();
}

bool birth_policy::creator_reports(tid_t creator)
{
    auto handle = target_.thread_pointer(creator);
    if (!handle || handle->is_null() || target_.agent() == nullptr)
        return false;
    auto on = target_.agent()->protocol().read_report_events(*handle);
    return on && *on;
}

bool birth_policy::enable_born_at_clone(tid_t child, const watch_mode& mode)
{
    auto handle = target_.thread_pointer(child);
    thread_agent* agent = target_.agent();
    if (!handle || agent == nullptr)
        return false;
    // Only a thread of the library: its record's tid is already set
    // (CLONE_PARENT_SETTID) when the parent reports the clone.
    auto tid = agent->protocol().read_tid(*handle);
    if (!tid || *tid != target_.ns_tid_of(child))
        return false;
    // Born now, so its flag "before" is the record's own original, not what
    // a dead thread left in it.
    changes_.restore()->note_born(*handle);
    if (!mode.enables() || settling_)
        return true;
    changes_.will_write_quietly();
    (void)agent->protocol().write_report_events(*handle, true, *tid);
    return true;
}

void birth_policy::inherit_mask(tid_t parent, tid_t child)
{
    const thread_backend* backend = target_.backend();
    if (backend == nullptr || !backend->traits().child_copies_creator_mask)
        return;
    auto creator = target_.thread_pointer(parent);
    auto born = target_.thread_pointer(child);
    if (!creator || !born || !changes_.restore()->is_mask_changed(*creator))
        return;
    auto tid = target_.agent()->protocol().read_tid(*born);
    if (!tid || *tid != target_.ns_tid_of(child))
        return;
    changes_.will_write_quietly();
    changes_.restore()->inherit_mask(*creator, *born);
}

}  // namespace tdctl::core
