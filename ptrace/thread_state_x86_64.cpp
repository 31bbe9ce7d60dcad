#include "ptrace/thread_state_x86_64.hpp"

#include <cerrno>

#include <elf.h>
#include <sys/uio.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

namespace {

// The kernel's restart codes (include/linux/errno.h; not in user headers).
constexpr long erestartsys = 512;
constexpr long erestartnointr = 513;
constexpr long erestartnohand = 514;
constexpr long erestart_restartblock = 516;
// Large enough for any XSAVE layout the kernel reports (AMX included).
constexpr std::size_t max_xstate_bytes = 16384;

std::uint64_t bit(int sig) { return std::uint64_t{1} << (sig - 1); }

// ESRCH -> false; other errors throw with `what` and the TID.
bool check(int err, const char* what, tid_t tid)
{
    if (err == ESRCH)
        return false;
    if (err != 0)
        throw error::from_errno(err, fmt::format("{} of task {}", what, tid.value));
    return true;
}

}  // namespace

std::optional<thread_state> thread_state::read(tid_t tid)
{
    thread_state s;
    auto general = registers::read(tid);
    if (!general)
        return std::nullopt;
    s.general_ = *general;
    if (!check(ptrace_call(PTRACE_GETFPREGS, tid, nullptr, &s.fpregs_), "reading FP registers", tid))
        return std::nullopt;
    s.xstate_.resize(max_xstate_bytes);
    iovec io{s.xstate_.data(), s.xstate_.size()};
    int err = ptrace_call(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &io);
    if (err == EINVAL || err == ENODEV)
        io.iov_len = 0;  // no XSAVE on this CPU: the FP image is the whole state
    else if (!check(err, "reading the XSAVE area", tid))
        return std::nullopt;
    s.xstate_.resize(io.iov_len);
    if (!check(ptrace_call(PTRACE_GETSIGMASK, tid, reinterpret_cast<void*>(sizeof s.sigmask_), &s.sigmask_),
               "reading the signal mask", tid))
        return std::nullopt;
    return s;
}

bool thread_state::write(tid_t tid) const
{
    if (!check(ptrace_call(PTRACE_SETSIGMASK, tid, reinterpret_cast<void*>(sizeof sigmask_),
                           const_cast<std::uint64_t*>(&sigmask_)),
               "writing the signal mask", tid))
        return false;
    if (!check(ptrace_call(PTRACE_SETFPREGS, tid, nullptr, const_cast<user_fpregs_struct*>(&fpregs_)),
               "writing FP registers", tid))
        return false;
    if (!xstate_.empty()) {
        iovec io{const_cast<std::uint8_t*>(xstate_.data()), xstate_.size()};
        if (!check(ptrace_call(PTRACE_SETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &io),
                   "writing the XSAVE area", tid))
            return false;
    }
    return general_.write(tid);
}

bool thread_state::in_restartable_syscall() const
{
    const auto& r = general_.raw();
    long rax = static_cast<long>(r.rax);
    if (static_cast<long>(r.orig_rax) < 0)
        return false;
    return rax == -erestartsys || rax == -erestartnointr || rax == -erestartnohand || rax == -erestart_restartblock;
}

bool write_signal_mask(tid_t tid, std::uint64_t mask)
{
    return check(ptrace_call(PTRACE_SETSIGMASK, tid, reinterpret_cast<void*>(sizeof mask), &mask),
                 "writing the signal mask", tid);
}

std::uint64_t mask_all_but_synchronous()
{
    std::uint64_t keep = bit(SIGSEGV) | bit(SIGBUS) | bit(SIGILL) | bit(SIGFPE) | bit(SIGTRAP) | bit(SIGSYS) |
                         bit(SIGKILL) | bit(SIGSTOP);
    return ~keep;
}

}  // namespace tdctl::ptrace
