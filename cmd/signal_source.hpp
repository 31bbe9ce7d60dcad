// SIGINT, SIGTERM and SIGHUP to tdctl arrive as readable data on a signalfd,
// so the command loop handles them between stops, never inside one.
#pragma once

#include "base/unique_fd.hpp"

namespace tdctl::cmd {

class signal_source {
public:
    /// Blocks SIGINT, SIGTERM, SIGHUP (and SIGPIPE is ignored) in the calling
    /// thread and opens a signalfd for the first three.
    signal_source();

    int fd() const { return fd_.get(); }

    /// The next pending signal number, or 0 when none is pending.
    int take();

private:
    unique_fd fd_;
};

}  // namespace tdctl::cmd
