// x86_64 general registers of a stopped task (PTRACE_GETREGS/SETREGS).
#pragma once

#include <cstddef>
#include <optional>
#include <sys/user.h>

#include "base/target_memory.hpp"
#include "base/types.hpp"

namespace tdctl::ptrace {

class registers {
public:
    /// Reads the registers of a task in ptrace-stop. std::nullopt if it
    /// vanished (ESRCH); throws tdctl::error for any other failure.
    static std::optional<registers> read(tid_t tid);

    /// The thread pointer alone (fs_base) of a task in ptrace-stop: one word
    /// of its saved registers (PTRACE_PEEKUSER at thread_pointer_offset), all
    /// of them if that fails. std::nullopt if it vanished (ESRCH); throws
    /// tdctl::error for any other failure.
    static std::optional<target_addr> read_thread_pointer(tid_t tid);

    /// Writes them back. False if the task vanished; throws otherwise.
    bool write(tid_t tid) const;

    target_addr pc() const { return target_addr{regs_.rip}; }
    void set_pc(target_addr a) { regs_.rip = a.value; }
    target_addr sp() const { return target_addr{regs_.rsp}; }
    void set_sp(target_addr a) { regs_.rsp = a.value; }
    /// The thread pointer: for glibc, the address of the thread's struct pthread.
    target_addr thread_pointer() const { return target_addr{regs_.fs_base}; }
    /// Where PTRACE_PEEKUSER finds the thread pointer (struct user's regs.fs_base).
    static constexpr std::size_t thread_pointer_offset = offsetof(struct user, regs) + offsetof(user_regs_struct, fs_base);
    /// Syscall number at a syscall or ptrace-event stop (orig_rax).
    long syscall_number() const { return static_cast<long>(regs_.orig_rax); }
    /// First syscall argument (rdi).
    std::uint64_t arg0() const { return regs_.rdi; }
    /// Second syscall argument (rsi).
    std::uint64_t arg1() const { return regs_.rsi; }
    /// The syscall's result (rax): in a stop that interrupted a blocking
    /// syscall, a negative restart code (-ERESTARTSYS ... -ERESTART_RESTARTBLOCK).
    long syscall_result() const { return static_cast<long>(regs_.rax); }
    /// Fifth syscall argument (r8): clone(2)'s tls on x86_64.
    std::uint64_t arg4() const { return regs_.r8; }
    /// Sixth syscall argument (r9).
    std::uint64_t arg5() const { return regs_.r9; }

    /// Performs a `ret` on these registers (not yet on the task: write() does
    /// that): pc <- the 8-byte return address at [sp], read from mem; sp += 8.
    /// False, with the registers unchanged, when [sp] cannot be read.
    bool emulate_return(target_memory& mem);

    const user_regs_struct& raw() const { return regs_; }
    /// Registers with the given values (to be written to a task with write()).
    static registers from_raw(const user_regs_struct& r)
    {
        registers out;
        out.regs_ = r;
        return out;
    }

private:
    user_regs_struct regs_{};
};

/// Bytes of the software breakpoint instruction.
inline constexpr unsigned char breakpoint_opcode = 0xcc;
/// After a breakpoint trap, the pc is this far past the breakpoint address.
inline constexpr std::int64_t breakpoint_pc_adjust = 1;

}  // namespace tdctl::ptrace
