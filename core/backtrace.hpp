// Call stacks of stopped LWPs, unwound with elfutils' libdwfl (CFI from
// .eh_frame/.debug_frame, symbols from the modules and their debug files).
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include <sys/types.h>

#include "base/types.hpp"

namespace tdctl::core {

/// One frame, innermost first.
struct stack_frame {
    target_addr pc;            ///< return address (or the pc, for frame 0)
    std::string function;      ///< symbol containing pc (adjusted into the call), "" if none
    std::uint64_t offset = 0;  ///< pc − symbol start, bytes
    std::string module;        ///< file name of the module, "" if none
};

/// Unwinds LWP `tid` of process `pid`, which must be in a ptrace-stop of
/// this tracer (the caller holds the target). At most `max_frames` frames.
/// The error is a line for people (libdwfl's message).
std::expected<std::vector<stack_frame>, std::string> unwind_lwp(pid_t pid, tid_t tid, int max_frames = 64);

}  // namespace tdctl::core
