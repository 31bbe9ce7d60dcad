// td_thr_set_event / td_thr_clear_event: a thread's own event mask.
#include "core/thread_agent.hpp"
#include "core/thread_handle.hpp"
#include "events/event_set.hpp"

namespace tdctl::core {

td_status thread_handle::set_event(const td_thr_events_t& events) const
{
    if (is_null())
        return td_fail(TD_NOCAPAB);
    auto& protocol = agent_->protocol();
    auto mask = protocol.read_thread_mask(handle_);
    if (!mask)
        return td_fail(TD_BADTH);
    return protocol.write_thread_mask(handle_, events::event_union(*mask, events));
}

td_status thread_handle::clear_event(const td_thr_events_t& events) const
{
    if (is_null())
        return td_fail(TD_NOCAPAB);
    auto& protocol = agent_->protocol();
    auto mask = protocol.read_thread_mask(handle_);
    if (!mask)
        return td_fail(TD_BADTH);
    return protocol.write_thread_mask(handle_, events::event_difference(*mask, events));
}

}  // namespace tdctl::core
