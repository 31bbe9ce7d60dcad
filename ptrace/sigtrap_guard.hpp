// Keeps the program's SIGTRAP disposition safe from our trap bytes. A trap
// byte the CPU executes makes the kernel force a SIGTRAP on the thread
// (force_sig_fault); when SIGTRAP is blocked in that thread, forcing it
// also resets the process's SIGTRAP action to SIG_DFL (and unblocks it),
// so a handler the program installed is lost and its next SIGTRAP of its
// own kills it. glibc's pthread_create blocks every signal from before its
// clone until after it has reported TD_CREATE (__nptl_create_event, where
// the nptl site is), so the creator always traps with SIGTRAP blocked.
//
// So at the creator's clone event, while trap bytes are planted and the
// program catches or ignores SIGTRAP (/proc/PID/status SigCgt, SigIgn),
// SIGTRAP is unblocked in the creator (PTRACE_SETSIGMASK); its trap then
// leaves the action alone, and the mask is put back at that trap, before
// the creator runs on (glibc restores its own saved mask after the report
// in any case). A creator that does not trap (its reporting is off) gets
// its own mask back from pthread_create; a mask this guard set and nobody
// changed since is put back at detach.
#pragma once

#include <cstdint>
#include <optional>

#include <sys/types.h>

#include "base/unique_fd.hpp"
#include "ptrace/task.hpp"

namespace tdctl::ptrace {

class sigtrap_guard {
public:
    /// For process pid; /proc/PID/status is opened on first use.
    explicit sigtrap_guard(pid_t pid) : pid_(pid) {}

    /// At the clone event of `parent` (stopped) while trap bytes are
    /// planted: unblocks SIGTRAP in parent when it blocks it and the program
    /// catches or ignores SIGTRAP, keeping its mask for put_back().
    void open_window(task& parent);
    /// At a stop of t (its trap, or detach): puts back the mask
    /// open_window() changed, if it is still the one open_window() set (a
    /// creator that did not trap has its own back from pthread_create, and
    /// keeps it). No-op otherwise.
    void put_back(task& t);
    /// After an exec: /proc/PID/status is the new image's.
    void reopen() { status_fd_.reset(); }

private:
    /// Whether the program has a handler for SIGTRAP or ignores it now.
    bool program_handles_sigtrap();

    pid_t pid_;
    unique_fd status_fd_;
};

}  // namespace tdctl::ptrace
