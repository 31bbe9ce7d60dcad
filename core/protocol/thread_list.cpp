#include "core/protocol/thread_list.hpp"

#include <algorithm>
#include <set>

#include "core/thread_agent.hpp"
#include "core/thread_handle.hpp"

namespace tdctl::core {

td_result<std::vector<thread_entry>> list_threads(target_access& target, thread_agent* agent)
{
    std::vector<thread_entry> rows;
    std::set<tid_t> claimed;
    if (agent != nullptr) {
        auto records = agent->thr_iter();
        if (!records)
            return td_fail(records.error());
        for (const thread_handle& th : *records) {
            thread_entry e;
            e.handle = th.value();
            e.has_record = true;
            // The row's fields and its LWP from one read of the record.
            td_result<std::optional<tid_t>> lwp = td_fail(TD_BADTH);
            if (auto both = th.get_info_and_lwp()) {
                e.info = both->first;
                lwp = both->second;
            } else {
                lwp = th.lwp();
            }
            if (lwp && *lwp && !claimed.contains(**lwp)) {
                e.kind = thread_entry_kind::running;
                e.lwp = **lwp;
                claimed.insert(e.lwp);
            } else {
                // No LWP runs it. An ended thread has passed the point where
                // glibc marks it exiting (td_thr_get_info's state then is no
                // longer TD_THR_ACTIVE); a record not yet cloned has not.
                bool exiting = e.info && e.info->ti_state != TD_THR_ACTIVE;
                e.kind = lwp && !*lwp && !exiting ? thread_entry_kind::starting : thread_entry_kind::ended;
            }
            rows.push_back(e);
        }
    }
    for (tid_t t : target.lwps()) {
        if (claimed.contains(t))
            continue;
        thread_entry e;
        e.kind = thread_entry_kind::lwp_only;
        e.lwp = t;
        rows.push_back(e);
    }
    for (auto& e : rows)
        if (e.lwp.value != 0)
            e.ns_tid = target.ns_tid_of(e.lwp);

    const pid_t pid = target.pid();
    auto rank = [pid](const thread_entry& e) {
        if (e.lwp.value == 0)
            return 2;
        return e.lwp.value == pid ? 0 : 1;
    };
    std::stable_sort(rows.begin(), rows.end(), [&](const thread_entry& a, const thread_entry& b) {
        int ra = rank(a), rb = rank(b);
        if (ra != rb)
            return ra < rb;
        return ra == 1 && a.lwp.value < b.lwp.value;
    });
    return rows;
}

}  // namespace tdctl::core
