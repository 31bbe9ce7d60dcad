// Where a thread was created: the creator's first return address outside
// the thread library, read while the creator is stopped at the TD_CREATE
// reporting address (frame 0 is the reporting function at its first
// instruction, so [sp] is its return address). Frames inside the reporting
// module (libc.so.6's pthread_create, libtdagent.so's wrapper) are stepped
// over with their CFI (.eh_frame: a CFA rule per return address, sp + N,
// or rbp + N in the first caller, looked up once and cached), so each report costs one register
// read and one memory read. A full stack (`watch --bt`) gives the same
// answer from its frames; this is the cheap read the summary needs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>

#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "ptrace/registers_x86_64.hpp"

namespace tdctl::core {

class call_site_reader {
public:
    explicit call_site_reader(pid_t pid);
    ~call_site_reader();
    call_site_reader(const call_site_reader&) = delete;
    call_site_reader& operator=(const call_site_reader&) = delete;

    /// The call site of the report a thread is stopped at (`regs`: its
    /// registers at the trap, `site`: the reporting address): a return
    /// address in the caller of pthread_create. std::nullopt when a frame
    /// cannot be stepped over (no CFI, a CFA not relative to sp, unreadable
    /// stack).
    std::optional<target_addr> read(const ptrace::registers& regs, target_addr site, target_memory& mem);
    /// read() from a stack already read: `stack` holds the bytes from sp up
    /// (at most stack_window of them; fewer where the stack ends).
    std::optional<target_addr> read_from(const ptrace::registers& regs, target_addr site,
                                         std::span<const std::byte> stack);

    /// Stack read per report, bytes (the frames stepped over fit easily).
    static constexpr std::size_t stack_window = 2048;

    /// The modules changed (an exec): every cached module and rule is dropped.
    void reset();

private:
    struct modules;
    /// How the frame whose pc is return address `ret` finds its CFA: sp (or
    /// rbp) at that pc plus an offset; std::nullopt for any other rule.
    struct cfa_rule {
        bool from_rbp = false;
        std::int64_t offset = 0;
    };
    std::optional<cfa_rule> cfa_of(std::uint64_t ret);
    /// An identity of the module holding `pc` (nullptr when none).
    const void* module_of(std::uint64_t pc);

    pid_t pid_;
    std::unique_ptr<modules> modules_;
    std::unordered_map<std::uint64_t, std::optional<cfa_rule>> offsets_;
    // At most this many frames inside the thread library are stepped over.
    static constexpr int max_library_frames = 6;
};

}  // namespace tdctl::core
