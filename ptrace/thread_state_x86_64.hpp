// Everything a hijacked x86_64 task must get back exactly: the general
// registers (PTRACE_GETREGS, orig_rax and fs_base included), the legacy FP
// state (PTRACE_GETFPREGS), the whole XSAVE area (PTRACE_GETREGSET
// NT_X86_XSTATE: AVX/AVX-512 upper halves, MPX, PKRU) and the signal mask
// (PTRACE_GETSIGMASK).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <signal.h>
#include <sys/user.h>

#include "base/types.hpp"
#include "ptrace/registers_x86_64.hpp"

namespace tdctl::ptrace {

class thread_state {
public:
    /// Reads the whole state of a task in ptrace-stop. std::nullopt if it
    /// vanished (ESRCH); throws tdctl::error (os) for any other failure.
    static std::optional<thread_state> read(tid_t tid);

    /// Writes it all back (the XSAVE area last, so it wins over the legacy
    /// FP image). False if the task vanished; throws otherwise.
    bool write(tid_t tid) const;

    const registers& general() const { return general_; }
    /// The signal mask as the kernel keeps it (64 bits: signals 1..64).
    std::uint64_t signal_mask() const { return sigmask_; }
    /// Bytes of the XSAVE area (0 when the kernel offers none).
    std::size_t xstate_size() const { return xstate_.size(); }
    /// The XSAVE area as PTRACE_GETREGSET NT_X86_XSTATE gave it (standard
    /// format; its sw_reserved bytes hold the kernel's signal-frame
    /// description); empty when the kernel offers none.
    std::span<const std::uint8_t> xstate() const { return xstate_; }
    /// The legacy FP image (PTRACE_GETFPREGS: the 512-byte FXSAVE layout).
    const user_fpregs_struct& fpregs() const { return fpregs_; }

    /// True when the task stopped inside a system call that the kernel will
    /// restart on resume (rax holds -ERESTARTSYS, -ERESTARTNOINTR,
    /// -ERESTARTNOHAND or -ERESTART_RESTARTBLOCK and orig_rax the call).
    /// Writing this state back as it was restarts that call: no EINTR.
    bool in_restartable_syscall() const;
    /// True when it stopped in user code (orig_rax is -1): no call to restart.
    bool in_user_code() const { return static_cast<long>(general_.raw().orig_rax) == -1; }

private:
    registers general_;
    user_fpregs_struct fpregs_{};
    std::vector<std::uint8_t> xstate_;
    std::uint64_t sigmask_ = 0;
};

/// Sets a stopped task's signal mask (PTRACE_SETSIGMASK, 64 bits). False if
/// it vanished; throws tdctl::error (os) otherwise.
bool write_signal_mask(tid_t tid, std::uint64_t mask);

/// Every signal blocked except those the kernel forces on a faulting task
/// (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS): blocking one of those
/// would make the kernel reset its handler to SIG_DFL when the fault comes.
std::uint64_t mask_all_but_synchronous();

}  // namespace tdctl::ptrace
