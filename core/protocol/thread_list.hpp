// The thread list `threads` shows: every record the thread library lists,
// once each and keyed by its handle, with the LWP that runs it, plus every
// LWP that has no record. Keyed by handle, not by LWP: glibc keeps the
// record of a thread that ended but was not joined, and reports it under the
// process ID, which is also the main thread's LWP.
#pragma once

#include <optional>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/target_access.hpp"
#include "core/td_result.hpp"

namespace tdctl::core {

class thread_agent;

/// What one row of the thread list is.
enum class thread_entry_kind {
    running,    ///< a record and the LWP that runs it
    ended,      ///< a record whose thread has ended and was not joined yet (a zombie): no LWP
    starting,   ///< a record set up for a thread that is not cloned yet: no LWP
    lwp_only,   ///< an LWP without a record (no thread library, not initialised yet, or
                ///< a thread whose record is already gone while its LWP finishes)
};

struct thread_entry {
    thread_entry_kind kind = thread_entry_kind::lwp_only;
    tid_t lwp;                          ///< TID in tdctl's PID namespace; 0 for ended and starting records
    std::optional<pid_t> ns_tid;        ///< that LWP's TID in the target's PID namespace (NSpid); nullopt without an LWP
    target_addr handle;                 ///< the record (pthread_t); null for lwp_only, and for the
                                        ///< single thread of a library that has not set up its lists
    bool has_record = false;            ///< a row of the library's list (td_ta_thr_iter)
    std::optional<td_thrinfo_t> info;   ///< td_thr_get_info; nullopt for lwp_only or a record that cannot be read
};

/// Every thread of the target: the main thread first, the other LWPs in TID
/// order, then the records no LWP runs, in the library's list order. Each
/// record of td_ta_thr_iter appears once, each LWP of /proc/PID/task once.
/// `agent` may be null (no thread library: LWPs only). Hold the target
/// meanwhile, so the lists do not change while they are walked. TD_DBERR
/// when the library's lists cannot be read.
td_result<std::vector<thread_entry>> list_threads(target_access& target, thread_agent* agent);

}  // namespace tdctl::core
