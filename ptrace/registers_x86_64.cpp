#include "ptrace/registers_x86_64.hpp"

#include <cerrno>

#include "base/error.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

std::optional<registers> registers::read(tid_t tid)
{
    registers r;
    int err = ptrace_call(PTRACE_GETREGS, tid, nullptr, &r.regs_);
    if (err == ESRCH)
        return std::nullopt;
    if (err != 0)
        throw error::from_errno(err, fmt::format("reading registers of task {}", tid.value));
    return r;
}

std::optional<target_addr> registers::read_thread_pointer(tid_t tid)
{
    long fs_base = 0;
    if (ptrace_call(PTRACE_PEEKUSER, tid, reinterpret_cast<void*>(thread_pointer_offset), nullptr, &fs_base) == 0)
        return target_addr{static_cast<std::uint64_t>(fs_base)};
    auto regs = read(tid);
    return regs ? std::optional<target_addr>(regs->thread_pointer()) : std::nullopt;
}

bool registers::write(tid_t tid) const
{
    int err = ptrace_call(PTRACE_SETREGS, tid, nullptr, const_cast<user_regs_struct*>(&regs_));
    if (err == ESRCH)
        return false;
    if (err != 0)
        throw error::from_errno(err, fmt::format("writing registers of task {}", tid.value));
    return true;
}

bool registers::emulate_return(target_memory& mem)
{
    std::uint64_t return_address = 0;
    if (!mem.read_value(sp(), return_address))
        return false;
    set_pc(target_addr{return_address});
    set_sp(sp() + 8);
    return true;
}

}  // namespace tdctl::ptrace
