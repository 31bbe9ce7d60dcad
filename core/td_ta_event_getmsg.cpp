// td_ta_event_getmsg: one message from some thread that has one buffered.
// Unlike glibc's libthread_db, the consume keeps the thread's event mask
// (the seed keeps mask and buffer apart), and a listed thread whose buffer is
// empty is taken off the list and skipped rather than failing with TD_DBERR.
#include "core/thread_agent.hpp"

namespace tdctl::core {

td_result<td_message> thread_agent::event_getmsg()
{
    auto list = protocol_.message_list();
    if (!list)
        return td_fail(list.error());
    for (target_addr rec : *list) {
        auto buf = protocol_.read_buffer(rec);
        if (!buf)
            return td_fail(buf.error());
        if (buf->is_empty()) {
            if (auto r = protocol_.unlink(rec); !r)
                return td_fail(r.error());
            continue;
        }
        if (auto r = protocol_.clear_buffer(rec); !r)
            return td_fail(r.error());
        if (auto r = protocol_.unlink(rec); !r)
            return td_fail(r.error());
        return td_message{buf->eventnum, rec, buf->eventdata};
    }
    return td_fail(TD_NOMSG);
}

}  // namespace tdctl::core
