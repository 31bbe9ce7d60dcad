// A scope in which every thread of the target is held, so that lists and
// buffers in target memory are read and edited while no thread can change
// them.
#pragma once

#include "cmd/output.hpp"
#include "core/session/session.hpp"

namespace tdctl::cmd {

/// Holds the target (session::interrupt) for the guard's lifetime, unless it
/// was held already, and lets it run again at the end of the scope. A resume
/// that fails there is reported on `out` and leaves the target held (the
/// user's `continue` can retry); it never leaves the destructor.
class target_hold {
public:
    target_hold(core::session& session, output& out);
    ~target_hold();
    target_hold(const target_hold&) = delete;
    target_hold& operator=(const target_hold&) = delete;

private:
    core::session& session_;
    output& out_;
    bool was_held_;
};

}  // namespace tdctl::cmd
