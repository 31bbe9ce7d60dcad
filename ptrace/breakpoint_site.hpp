// A physical breakpoint: an address, the bytes it replaced, and how a thread
// that hit it is resumed (its step-over). The reasons a site exists (an event
// reporting address, the launch entry point) are kept by the owner, which
// counts them; one site can serve several reasons.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>

#include "base/change_journal.hpp"
#include "base/target_memory.hpp"
#include "base/types.hpp"

namespace tdctl::ptrace {

/// How a thread is resumed after it trapped on a site. Measured on x86_64: one
/// stop is ≈ 11–14 µs, a single-step step-over 2.7–3.8× that, hence the order.
enum class step_over_kind {
    /// `ret` followed by unreachable padding: `cc c3` is written, and the trap
    /// leaves the pc on the `c3`, so resuming needs no register change.
    resume_in_place,
    /// `ret` (or `endbr64; ret`, `repz ret`): the return is emulated,
    /// pc <- [sp], sp += 8.
    emulate_return,
    /// Anything else: remove, single-step, re-insert.
    single_step,
    /// No trap byte: the reporting code stops its thread itself with a signal
    /// whose disposition is "ignore" (libtdagent.so's stop flags), so resuming
    /// without that signal is the whole step-over. A thread let go in that
    /// stop by a tracer that died takes the signal and goes on.
    signal_stop,
};

const char* step_over_name(step_over_kind k);

/// Chooses the step-over from the bytes found at the site (`code`, at least
/// 16 bytes where readable) and the size of the function there in bytes
/// (st_size; 0 when unknown). `patch` receives the bytes to write, and its
/// used length is returned through `patch_len`.
step_over_kind classify_site(std::span<const std::byte> code, std::uint64_t function_size,
                             std::array<std::byte, 2>& patch, std::size_t& patch_len);

/// Where a signal-stop site's switch is: one byte the reporting code reads
/// (0: report silently; N: raise signal N and stop), and the signal.
struct stop_flag {
    target_addr address;
    int signo = 0;
};

class breakpoint_site {
public:
    breakpoint_site(target_addr addr, std::uint64_t function_size) : addr_(addr), function_size_(function_size) {}
    /// A signal-stop site for the reporting function at addr: insert() writes
    /// flag.signo into the byte at flag.address (journaled, original 0), and
    /// remove() puts 0 back; the function's code is never touched.
    breakpoint_site(target_addr addr, stop_flag flag)
        : addr_(addr), function_size_(0), kind_(step_over_kind::signal_stop), flag_(flag)
    {
    }

    /// Reads the original bytes, chooses the step-over, journals the change
    /// (before any byte is written) and writes the patch through `mem`.
    /// Throws tdctl::error if the bytes cannot be read or written.
    void insert(target_memory& mem, change_journal& journal);

    /// Writes the original bytes back through the journal (first byte first,
    /// so a thread never sees a half-restored site). False if the write
    /// failed (process gone).
    bool remove(change_journal& journal);

    /// The byte written for a signal-stop site (null address otherwise).
    const stop_flag& flag() const { return flag_; }

    /// Writes the patch again after a single-step over the original bytes.
    bool reinsert(target_memory& mem);
    /// Writes the original bytes for a single-step; reinsert() undoes it.
    bool lift(target_memory& mem);

    target_addr address() const { return addr_; }
    step_over_kind kind() const { return kind_; }
    bool is_inserted() const { return inserted_; }
    std::span<const std::byte> saved_bytes() const { return {saved_.data(), patch_len_}; }
    /// Where insert() wrote: the site's first byte, or a signal-stop site's flag.
    target_addr patched_address() const { return kind_ == step_over_kind::signal_stop ? flag_.address : addr_; }
    /// Writes the original bytes where insert() wrote into another copy of
    /// the target's memory (a forked child's), not journaled: that copy is
    /// let go. False if the write failed.
    bool restore_into(target_memory& copy) const
    {
        return !inserted_ || copy.write(patched_address(), saved_bytes());
    }

    /// The bytes in the target's text as they were before insert().
    std::string describe() const;

private:
    void insert_flag(target_memory& mem, change_journal& journal);

    target_addr addr_;
    std::uint64_t function_size_;
    step_over_kind kind_ = step_over_kind::single_step;
    std::array<std::byte, 2> saved_{};
    std::array<std::byte, 2> patch_{};
    std::size_t patch_len_ = 1;
    bool inserted_ = false;
    stop_flag flag_{};
};

}  // namespace tdctl::ptrace
