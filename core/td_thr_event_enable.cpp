// td_thr_event_enable: a thread's event reporting on or off (ti_traceme).
#include "core/thread_agent.hpp"
#include "core/thread_handle.hpp"

namespace tdctl::core {

td_status thread_handle::event_enable(bool on) const
{
    auto& protocol = agent_->protocol();
    if (is_null())
        return protocol.write_initial_report_events(on);
    if (!protocol.read_tid(handle_))
        return td_fail(TD_BADTH);
    return protocol.write_report_events(handle_, on);
}

}  // namespace tdctl::core
