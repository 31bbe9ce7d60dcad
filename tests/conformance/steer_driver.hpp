// Driving the `steer` fixture while a tdctl session traces it. The session
// waits for stops with waitpid in this thread, so every command that makes the
// fixture create or end a thread must be answered while the session's stops
// are serviced (pump()); a plain child_process::ask would wait forever on a
// thread held at its clone stop.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/session/session.hpp"
#include "tests/support/support.hpp"

namespace tdctl::conformance {

using namespace std::chrono_literals;

/// One thread steer created, as its `spawn` answer reports it.
struct spawned_thread {
    int index = -1;
    pid_t tid = 0;
    target_addr handle;   ///< pthread_t: the struct pthread address
};

class steer_fixture {
public:
    /// Starts steer with a record file; it waits for commands at once.
    steer_fixture();

    pid_t pid() const { return child_.pid(); }
    test::child_process& child() { return child_; }
    const std::string& record_path() const { return record_.path(); }

    /// Sends one command and returns its answer. While waiting, `s` (when
    /// given, alive and not held) gets its stops serviced; what they yield is
    /// kept for take_events(). Throws std::runtime_error after 10 s.
    std::string ask(std::string_view command, core::session* s);

    /// `spawn` (or `spawn-detached`); checks the answer's form.
    spawned_thread spawn(core::session* s, bool detached = false);
    /// `release I`, then waits (servicing stops) until the thread's LWP has
    /// left /proc/PID/task, so whatever it reports at its end is done.
    void release(const spawned_thread& t, core::session* s);
    /// `join I` (the thread must have been released).
    void join(const spawned_thread& t, core::session* s);

    /// Session events collected while commands were answered, then cleared.
    std::vector<core::session_event> take_events();

    /// Services stops of `s` for about `duration`, collecting events.
    void pump_for(core::session& s, std::chrono::milliseconds duration);

private:
    void pump_once(core::session* s, int timeout_ms);

    test::temp_file record_;
    test::child_process child_;
    std::vector<core::session_event> events_;
};

/// The thread handle of `handle` in the session's agent.
core::thread_handle handle_in(core::session& s, target_addr handle);
/// The main thread's handle (map_lwp2thr of the process id); REQUIREs success.
core::thread_handle main_thread(core::session& s);

/// A mask with just these events.
td_thr_events_t mask_of(std::initializer_list<td_event_e> events);
/// "{TD_CREATE,TD_DEATH}" (event names, or bit numbers past TD_MAX_EVENT_NUM).
std::string describe_mask(const td_thr_events_t& m);
bool same_mask(const td_thr_events_t& a, const td_thr_events_t& b);
/// "TD_NOMSG": td_err_name as a std::string (doctest prints a bare char* as a pointer).
std::string td_name(td_err_e e);

/// Reads len bytes of the target through /proc/PID/mem (independent of the
/// session's memory access); REQUIREs a full read.
std::vector<std::uint8_t> peek(pid_t pid, target_addr addr, std::size_t len);
/// Writes bytes into the target through /proc/PID/mem; REQUIREs success.
void poke(pid_t pid, target_addr addr, const std::vector<std::uint8_t>& bytes);

}  // namespace tdctl::conformance
