// SIGINT, SIGTERM and SIGHUP to tdctl arrive as readable data on a signalfd,
// so the command loop handles them between stops, never inside one. SIGCONT
// (tdctl continued after a stop, `fg`/`bg` in a shell) comes the same way, so
// the prompt can take the terminal back.
#pragma once

#include "base/unique_fd.hpp"

namespace tdctl::cmd {

class signal_source {
public:
    /// Blocks SIGINT, SIGTERM, SIGHUP and SIGCONT (and SIGPIPE is ignored) in
    /// the calling thread and opens a signalfd for the four. A blocked
    /// SIGCONT still continues a stopped tdctl; only its notice is queued.
    signal_source();

    int fd() const { return fd_.get(); }

    /// The next pending SIGINT, SIGTERM or SIGHUP, or 0 when none is
    /// pending. A SIGCONT read on the way is remembered for take_continued().
    int take();

    /// Whether a SIGCONT was read by take() since the last call (call take()
    /// first to read what is queued).
    bool take_continued();

private:
    unique_fd fd_;
    bool continued_ = false;
};

}  // namespace tdctl::cmd
