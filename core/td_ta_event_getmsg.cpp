// td_ta_event_getmsg: one message from some thread that has one buffered.
// Unlike glibc's libthread_db, the consume keeps the thread's event mask
// (the seed keeps mask and buffer apart), a listed thread whose buffer is
// empty is taken off the list and skipped rather than failing with TD_DBERR,
// and a listed record that is no longer mapped ends the list.
#include "core/thread_agent.hpp"

namespace tdctl::core {

namespace {

// A walk that met a record being freed under it (its stack unmapped between
// two reads) is tried again from the list head, a few times.
constexpr int getmsg_attempts = 3;

}  // namespace

td_result<td_message> thread_agent::event_getmsg()
{
    td_err_e last = TD_DBERR;
    for (int attempt = 0; attempt < getmsg_attempts; ++attempt) {
        auto list = protocol_.message_list();
        if (!list)
            return td_fail(list.error());
        bool again = false;
        for (target_addr rec : *list) {
            auto buf = protocol_.read_buffer(rec);
            if (!buf) {
                last = buf.error();
                again = true;
                break;
            }
            if (buf->is_empty()) {
                if (auto r = protocol_.unlink(rec); !r) {
                    last = r.error();
                    again = true;
                    break;
                }
                continue;
            }
            if (auto r = protocol_.clear_buffer(rec); !r)
                return td_fail(r.error());
            if (auto r = protocol_.unlink(rec); !r)
                return td_fail(r.error());
            return td_message{buf->eventnum, rec, buf->eventdata};
        }
        if (!again)
            return td_fail(TD_NOMSG);
    }
    return td_fail(last);
}

}  // namespace tdctl::core
