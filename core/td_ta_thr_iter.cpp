// td_ta_thr_iter and td_ta_map_lwp2thr: the live threads of the target.
#include "core/thread_agent.hpp"
#include "core/protocol/thread_backend.hpp"
#include "core/thread_handle.hpp"

namespace tdctl::core {

td_result<std::vector<thread_handle>> thread_agent::thr_iter()
{
    auto records = protocol_.thread_records();
    if (!records)
        return td_fail(records.error());
    std::vector<thread_handle> out;
    out.reserve(records->size());
    for (target_addr rec : *records)
        out.emplace_back(*this, rec);
    if (out.empty()) {
        // The library has not set up its lists yet: one thread, no record.
        out.emplace_back(*this, target_addr{});
    }
    return out;
}

td_result<thread_handle> thread_agent::map_lwp2thr(tid_t lwp)
{
    // Where the thread pointer is the record (nptl), its tid field (a TID of
    // the target's PID namespace) confirms it. Otherwise, or when the LWP was
    // never seen stopped, the lists.
    auto ns_tid = target().ns_tid_of(lwp);
    if (!ns_tid)
        return td_fail(TD_NOTHR);
    if (auto tp = seam().thread_pointer_handle(lwp); tp && !tp->is_null()) {
        if (auto tid = protocol_.read_tid(*tp); tid && *tid == *ns_tid)
            return thread_handle(*this, *tp);
    }
    auto records = protocol_.thread_records();
    if (!records)
        return td_fail(records.error());
    for (target_addr rec : *records)
        if (auto tid = protocol_.read_tid(rec); tid && *tid == *ns_tid)
            return thread_handle(*this, rec);
    if (records->empty() && lwp.value == target().pid())
        return thread_handle(*this, target_addr{});
    return td_fail(TD_NOTHR);
}

}  // namespace tdctl::core
