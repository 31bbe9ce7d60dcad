// A way back for a hijacked thread that needs no tracer: the frame the
// kernel's rt_sigreturn reads (arch/x86/kernel/signal_64.c: struct
// rt_sigframe, a ucontext with the general registers, the signal mask and a
// pointer to the FP/XSAVE area), built from a saved thread_state and laid
// above a remote call's return slot. When that slot holds the address of a
// `mov $15, %rax; syscall` (glibc's __restore_rt), the call's `ret` lands on
// rt_sigreturn and the kernel puts every register, the FP/vector state and
// the signal mask back at once, whoever is (or is not) tracing the thread.
// The frame is the slot's landing place after a time limit or a tracer's
// death (ptrace/remote_call.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <sys/types.h>

#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "ptrace/thread_state_x86_64.hpp"

namespace tdctl::ptrace {

/// Where a return frame lies below a thread's stack pointer.
struct return_frame_layout {
    /// The frame's first word (rt_sigframe.pretcode), which is also the
    /// call's return slot: the callee starts with rsp here, so it is
    /// 8 modulo 16 as after a `call`. rt_sigreturn finds the frame at
    /// rsp − 8 once the `ret` has popped this word.
    std::uint64_t slot = 0;
    /// The FP/XSAVE area the frame points to, 64-byte aligned (XRSTOR).
    std::uint64_t fpstate = 0;
    /// Bytes from `slot` to the end of the FP area (its closing magic word
    /// included); all of it lies below sp − 128 (the red zone is untouched).
    std::size_t size = 0;
};

/// The layout for a thread whose stack pointer is `sp` and whose FP area
/// takes `fp_bytes` (return_frame_fp_bytes()).
return_frame_layout layout_return_frame(std::uint64_t sp, std::size_t fp_bytes);

/// Bytes of the FP area a frame for `s` carries: the XSAVE area and the
/// 4-byte FP_XSTATE_MAGIC2 after it, or the 512-byte FXSAVE image when the
/// kernel offers no XSAVE area.
std::size_t return_frame_fp_bytes(const thread_state& s);

/// The frame's bytes (layout.size of them, to be written at layout.slot),
/// with `return_address` as its first word. The registers are `s`'s, except
/// that a system call the thread was stopped in (thread_state::
/// in_restartable_syscall) is set up to run again, as the kernel would have
/// restarted it (rax = the call, or restart_syscall for
/// -ERESTART_RESTARTBLOCK; rip back over the 2-byte `syscall`):
/// rt_sigreturn itself restarts nothing. The signal mask is `s`'s; the
/// alternate-stack field holds an invalid mode, which the kernel's
/// restore_altstack() rejects without a change (its errors are ignored).
std::vector<std::byte> build_return_frame(const thread_state& s, const return_frame_layout& layout,
                                          std::uint64_t return_address);

/// The address of a `mov $15, %rax; syscall` (48 c7 c0 0f 00 00 00 0f 05:
/// rt_sigreturn, glibc's __restore_rt) in an executable mapping of
/// libc.so.6 in process `pid` (/proc/PID/maps, code read through `memory`).
/// std::nullopt when libc is not mapped or holds none.
std::optional<target_addr> find_sigreturn_code(pid_t pid, target_memory& memory);

}  // namespace tdctl::ptrace
