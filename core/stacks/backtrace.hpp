// Call stacks of stopped LWPs, unwound with elfutils' libdwfl (CFI from
// .eh_frame/.debug_frame), functions named from the session's symbol tables
// (libdwfl's for modules those do not hold), file:line from DWARF where a
// build-id-checked debug file has it. One unwinder per session: libdwfl is
// attached once and its modules (ELF, CFI, line tables) are kept; the maps
// are reported again only when a pc falls outside every known module and
// /proc/PID/maps has changed since.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>
#include <sys/user.h>

#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "events/stack_frame.hpp"

namespace tdctl::symbols {
class module_set;
}

namespace tdctl::core {

using events::stack_frame;

/// Where an unwind starts.
struct unwind_start {
    user_regs_struct regs{};   ///< the LWP's general registers (its trap's, or PTRACE_GETREGS)
    /// The address of an event reporting function (a bare `ret`, SPEC §2)
    /// the LWP stands in: trapped on its planted site (pc one past it, the
    /// `ret` not run), or — `returned` — just after tdctl performed that
    /// `ret` for it (a hold). Frame 0 is then that function, and the frames
    /// below start from its caller's return address. Null otherwise.
    target_addr report_site;
    bool returned = false;
};

class unwinder {
public:
    /// For process `pid`, reading its memory through `mem` and naming
    /// functions with `modules` (may be nullptr) where they hold the pc.
    /// Both must outlive the unwinder. libdwfl is set up at the first unwind.
    unwinder(pid_t pid, target_memory& mem, const symbols::module_set* modules);
    ~unwinder();
    unwinder(const unwinder&) = delete;
    unwinder& operator=(const unwinder&) = delete;

    /// Unwinds LWP `tid`, which must be in a ptrace-stop of this tracer, from
    /// `start`; at most `max_frames` frames (≥ 1). Reads only memory (no
    /// ptrace call, no register write). The error is a line for people.
    std::expected<std::vector<stack_frame>, std::string> unwind(tid_t tid, const unwind_start& start,
                                                                int max_frames);

    /// The frame of return address `ret` as unwind() names it (looked up one
    /// byte back, inside its call; cached per address): for a call site the
    /// target itself took (a streamed report's). std::nullopt when the
    /// modules cannot be read.
    std::optional<stack_frame> frame_of_return_address(target_addr ret);

    /// The target has run since the last unwind: the next pc found outside
    /// every known module is worth one new look at /proc/PID/maps.
    void target_ran() { maps_checked_ = false; }

    struct impl;

private:
    std::unique_ptr<impl> impl_;
    bool maps_checked_ = false;
};

}  // namespace tdctl::core
