// tdctl and the terminal's job control. A stop by the terminal (SIGTTIN,
// SIGTTOU) would freeze tdctl while the target's threads sit in tracing
// stops, so tdctl never lets the terminal stop it: its output goes out
// whatever the terminal's `tostop` says, and it reads the terminal (and
// shows a prompt) only while its process group is the foreground one.
#pragma once

namespace tdctl::cmd {

/// Whether tdctl may read the terminal on `fd` now: true when `fd` is not a
/// terminal, is not tdctl's controlling terminal (no job control applies),
/// or tdctl's process group is the terminal's foreground group
/// (tcgetpgrp(fd) == getpgrp()). False for a background job (`tdctl ... &`).
bool owns_terminal(int fd);

/// Ignores SIGTTOU and SIGTTIN: a write to the terminal from the background
/// goes out instead of stopping tdctl, and a read that slips through from
/// the background fails with EIO instead of stopping it. Called once a
/// launched target has been forked, so the target keeps the dispositions
/// tdctl inherited.
void ignore_terminal_stops();

}  // namespace tdctl::cmd
