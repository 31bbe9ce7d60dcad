// The `steer` fixture launched under a core::session (core::session::launch),
// with or without libtdagent preloaded, so one test source runs against
// either backend. Commands go through two inherited pipes
// (fixtures/e2e_steer_fds.c), since a launched child shares the test's stdio.
// While an answer is awaited the session's stops are serviced (as in
// tests/conformance/steer_driver.hpp): a thread held at a clone stop or a
// reporting address would otherwise never let the fixture answer.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "base/unique_fd.hpp"
#include "core/session/session.hpp"
#include "tests/support/temp_file.hpp"

namespace tdctl::agent_e2e {

enum class backend { nptl, tdagent };

/// "nptl" / "tdagent": the name protocol_layout::backend carries.
const char* backend_name(backend b);

/// The events the backend has a reporting address for (SPEC §2, §5).
std::vector<td_event_e> supported_events(backend b);
/// TD_SWITCHTO, TD_SWITCHFROM, TD_PREEMPT, TD_IDLE and, on nptl, everything
/// but TD_CREATE and TD_DEATH.
std::vector<td_event_e> unsupported_events(backend b);

/// One thread steer made: its index, TID, and the thread handle in the
/// session's agent (nptl: the pthread_t; tdagent: the agent's record).
struct steered_thread {
    int index = -1;
    pid_t tid = 0;
    std::uint64_t pthread = 0;  ///< pthread_t as steer printed it
    target_addr handle;
};

class launched_steer {
public:
    /// Launches e2e_steer_fds with a record file, preloading the agent for
    /// backend::tdagent; runs it until it answers a ping. REQUIREs that the
    /// session found the expected backend.
    explicit launched_steer(backend b);
    /// Kills the target if it is still traced; reaps it either way.
    ~launched_steer();
    launched_steer(const launched_steer&) = delete;
    launched_steer& operator=(const launched_steer&) = delete;

    core::session& session() { return *session_; }
    pid_t pid() const { return pid_; }
    backend which() const { return backend_; }
    const std::string& record_path() const { return record_.path(); }

    /// Sends a command and returns its answer, servicing the session's stops
    /// meanwhile (unless it is held or detached). Throws std::runtime_error
    /// after 10 s.
    std::string ask(std::string_view command);
    steered_thread spawn(bool detached = false);
    /// `release I`, then waits (servicing stops) until the LWP has left
    /// /proc/PID/task.
    void release(const steered_thread& t);
    void join(const steered_thread& t);
    /// Services stops for about `duration`.
    void pump_for(std::chrono::milliseconds duration);
    /// Events collected while servicing, then cleared.
    std::vector<core::session_event> take_events();

private:
    void pump_once(int timeout_ms);
    std::optional<std::string> read_answer(int timeout_ms);

    backend backend_;
    test::temp_file record_;
    unique_fd commands_;   // our end: steer's stdin
    unique_fd answers_;    // our end: steer's stdout
    std::string pending_;
    std::unique_ptr<core::session> session_;
    pid_t pid_ = -1;
    std::vector<core::session_event> events_;
};

}  // namespace tdctl::agent_e2e
