// td_ta_set_event / td_ta_clear_event: the target's global event mask.
#include "core/thread_agent.hpp"
#include "events/event_set.hpp"

namespace tdctl::core {

td_result<td_thr_events_t> thread_agent::global_mask()
{
    return protocol_.read_global_mask();
}

td_status thread_agent::set_event(const td_thr_events_t& events)
{
    auto mask = protocol_.read_global_mask();
    if (!mask)
        return td_fail(mask.error());
    return protocol_.write_global_mask(events::event_union(*mask, events));
}

td_status thread_agent::clear_event(const td_thr_events_t& events)
{
    auto mask = protocol_.read_global_mask();
    if (!mask)
        return td_fail(mask.error());
    return protocol_.write_global_mask(events::event_difference(*mask, events));
}

}  // namespace tdctl::core
