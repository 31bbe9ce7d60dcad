// td_thr_set_event / td_thr_clear_event: a thread's own event mask.
#include "core/thread_agent.hpp"
#include "core/thread_handle.hpp"
#include "events/event_set.hpp"

namespace tdctl::core {

namespace {

// Reads the thread's mask, combines it with `events` and writes it back.
template <typename Combine>
td_status edit_thread_mask(thread_agent* agent, target_addr handle, const td_thr_events_t& events, Combine combine)
{
    auto& protocol = agent->protocol();
    auto mask = protocol.read_thread_mask(handle);
    if (!mask)
        return td_fail(TD_BADTH);
    return protocol.write_thread_mask(handle, combine(*mask, events));
}

}  // namespace

td_status thread_handle::set_event(const td_thr_events_t& events) const
{
    if (is_null())
        return td_fail(TD_NOCAPAB);
    return edit_thread_mask(agent_, handle_, events, events::event_union);
}

td_status thread_handle::clear_event(const td_thr_events_t& events) const
{
    if (is_null())
        return td_fail(TD_NOCAPAB);
    return edit_thread_mask(agent_, handle_, events, events::event_difference);
}

}  // namespace tdctl::core
