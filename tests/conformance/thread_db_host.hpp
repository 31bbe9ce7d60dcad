// Hosting the system's libthread_db.so.1 (glibc's nptl_db) over a tdctl
// session, as the oracle of SPEC §2.1: the test program provides the ps_*
// proc_service callbacks (thread_db_host.cpp, exported from the executable so
// the dlopen'ed library binds to them), implemented on tdctl's
// core::target_access for memory and symbols and on ptrace for registers.
#pragma once

#include <string>
#include <vector>

#include <proc_service.h>
#include <thread_db.h>

#include "base/types.hpp"
#include "core/target_access.hpp"
#include "core/td_result.hpp"
#include "core/thread_agent.hpp"

/// What libthread_db hands back to every ps_* callback: the target.
struct ps_prochandle {
    tdctl::core::target_access* target = nullptr;
};

namespace tdctl::conformance {

/// glibc's libthread_db.so.1, loaded once per test program.
class thread_db_library {
public:
    /// The loaded library. When no libthread_db.so.1 exists on this machine
    /// the test program is skipped (exit 77, with a message); one that exists
    /// but does not load or initialise fails the test (std::runtime_error).
    static thread_db_library& get_or_skip();

    decltype(&::td_init) init = nullptr;
    decltype(&::td_ta_new) ta_new = nullptr;
    decltype(&::td_ta_delete) ta_delete = nullptr;
    decltype(&::td_ta_event_addr) ta_event_addr = nullptr;
    decltype(&::td_ta_set_event) ta_set_event = nullptr;
    decltype(&::td_ta_clear_event) ta_clear_event = nullptr;
    decltype(&::td_ta_event_getmsg) ta_event_getmsg = nullptr;
    decltype(&::td_ta_thr_iter) ta_thr_iter = nullptr;
    decltype(&::td_ta_map_lwp2thr) ta_map_lwp2thr = nullptr;
    decltype(&::td_thr_get_info) thr_get_info = nullptr;
    decltype(&::td_thr_event_enable) thr_event_enable = nullptr;
    decltype(&::td_thr_set_event) thr_set_event = nullptr;
    decltype(&::td_thr_clear_event) thr_clear_event = nullptr;
    decltype(&::td_thr_event_getmsg) thr_event_getmsg = nullptr;

    std::string path;   ///< where it was loaded from (dlinfo)

private:
    thread_db_library() = default;
    void* handle_ = nullptr;
};

/// One libthread_db thread agent (td_ta_new) over a target; td_ta_delete at
/// scope exit. Results use tdctl's td_result so both sides compare alike.
class thread_db_agent {
public:
    /// td_ta_new; REQUIREs TD_OK (showing what ps_pglobal_lookup was asked).
    thread_db_agent(thread_db_library& lib, core::target_access& target);
    ~thread_db_agent();
    thread_db_agent(const thread_db_agent&) = delete;
    thread_db_agent& operator=(const thread_db_agent&) = delete;

    core::td_result<td_notify_t> event_addr(td_event_e e);
    core::td_result<std::vector<target_addr>> thr_iter();
    core::td_result<td_thrinfo_t> get_info(target_addr th);
    core::td_result<target_addr> map_lwp2thr(pid_t lwp);
    core::td_status event_enable(target_addr th, bool on);
    core::td_status thr_set_event(target_addr th, td_thr_events_t mask);
    core::td_status thr_clear_event(target_addr th, td_thr_events_t mask);
    core::td_status ta_set_event(td_thr_events_t mask);
    core::td_status ta_clear_event(td_thr_events_t mask);
    core::td_result<core::td_message> ta_event_getmsg();
    core::td_result<core::td_message> thr_event_getmsg(target_addr th);

private:
    td_thrhandle_t make_handle(target_addr th) const;

    thread_db_library& lib_;
    ps_prochandle ph_;
    td_thragent_t* ta_ = nullptr;
};

/// Every "object:symbol" libthread_db asked ps_pglobal_lookup for, in order,
/// with " -> any module" when it was found only outside the named object and
/// " -> missing" when not at all. For messages and the report.
const std::vector<std::string>& oracle_lookups();

}  // namespace tdctl::conformance
