// td_thr_event_getmsg: this thread's buffered message, consumed. Unlike
// glibc's libthread_db, the thread is unlinked wherever it sits on the list
// (glibc only manages the head) and its mask is kept.
#include "core/thread_agent.hpp"
#include "core/thread_handle.hpp"

namespace tdctl::core {

td_result<td_message> thread_handle::event_getmsg() const
{
    if (is_null())
        return td_fail(TD_BADTH);
    auto& protocol = agent_->protocol();
    auto buf = protocol.read_buffer(handle_);
    if (!buf)
        return td_fail(TD_BADTH);
    if (buf->is_empty())
        return td_fail(TD_NOMSG);
    if (auto r = protocol.clear_buffer(handle_); !r)
        return td_fail(r.error());
    if (auto r = protocol.unlink(handle_); !r)
        return td_fail(r.error());
    return td_message{buf->eventnum, handle_, buf->eventdata};
}

}  // namespace tdctl::core
