// The session commands act on, and what became of its target: exited (the
// raw wait status) or detached. `attach` and `run` put another session in
// the slot once the last one's target is gone, so the prompt goes on.
#pragma once

#include <memory>
#include <optional>

#include "core/session/session.hpp"

namespace tdctl::cmd {

class session_slot {
public:
    /// `launched`: the session's target was launched by tdctl (not attached to).
    session_slot(std::unique_ptr<core::session> session, bool launched);

    /// The session of the current target, or of the last one (detached or
    /// exited) until another starts. Only while has_session().
    core::session& session() { return *session_; }
    /// False only after an `attach` or `run` that failed: the last session
    /// was let go first (its change journal is the one the guardian watches).
    bool has_session() const { return session_ != nullptr; }
    /// The current session's target was launched by tdctl.
    bool launched() const { return launched_; }
    /// There is a session and its target is alive (detached or not).
    bool is_alive() const { return session_ && session_->is_alive(); }
    /// A target to act on: alive, not exited, not detached.
    bool has_target() const { return is_alive() && !detached_ && !exit_status_; }

    /// Raw wait status once the target's exit has been noted.
    std::optional<int> exit_status() const { return exit_status_; }
    bool detached() const { return detached_; }
    void note_exit(int raw_status) { exit_status_ = raw_status; }
    void note_detached() { detached_ = true; }

    /// Lets the current session go (detaching its target), before the next
    /// one starts: its change journal holds the block the guardian watches,
    /// which the next one claims.
    void release() { session_.reset(); }
    /// Makes `next` the session commands act on.
    void start(std::unique_ptr<core::session> next, bool launched);

private:
    std::unique_ptr<core::session> session_;
    bool launched_ = false;
    std::optional<int> exit_status_;
    bool detached_ = false;
};

}  // namespace tdctl::cmd
