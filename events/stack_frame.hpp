// One frame of a call stack, as `bt` and the events of `watch --bt` carry it.
#pragma once

#include <cstdint>
#include <string>

#include "base/types.hpp"

namespace tdctl::events {

/// One frame, innermost first.
struct stack_frame {
    target_addr pc;            ///< return address (or the pc, for frame 0)
    std::string function;      ///< symbol containing pc (adjusted into the call), demangled; "" if none
    std::uint64_t offset = 0;  ///< pc − symbol start, bytes
    std::string module;        ///< file name of the module, "" if none
    std::string file;          ///< source file of the call (or of pc, frame 0), "" without debug info
    int line = 0;              ///< its line, 0 without debug info
};

}  // namespace tdctl::events
