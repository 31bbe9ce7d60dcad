// A Ctrl-C at the terminal, seen from a launched program. The terminal sends
// SIGINT to its whole foreground process group, and a program tdctl launched
// is in tdctl's own group: one key press reaches both. With a prompt, that
// key press is the user's interrupt of tdctl (it ends the running `watch`,
// `stop` or `sleep`), so the program must not take it — as under gdb, where
// a Ctrl-C stops the program instead of killing it. A SIGINT someone sends
// with kill(2) or tgkill(2) is the program's and is delivered as always.
#pragma once

#include <sys/types.h>

#include "base/types.hpp"

namespace tdctl::ptrace {

class terminal_interrupts {
public:
    /// ours: a prompt owns the session, so the terminal's SIGINT is tdctl's.
    explicit terminal_interrupts(bool ours = false) : ours_(ours) {}

    /// Whether the signal-delivery-stop of `tid` for `sig` is a terminal's
    /// interrupt that tdctl takes instead of the program: sig is SIGINT, the
    /// interrupts are ours, and the kernel sent it (si_code SI_KERNEL: the
    /// terminal's line discipline, kill_pgrp; a process's kill() gives
    /// SI_USER, tgkill() SI_TKILL, sigqueue() SI_QUEUE). One
    /// PTRACE_GETSIGINFO, only for SIGINT; false when it fails.
    bool takes(tid_t tid, int sig) const;

private:
    bool ours_;
};

}  // namespace tdctl::ptrace
