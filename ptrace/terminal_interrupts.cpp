#include "ptrace/terminal_interrupts.hpp"

#include <csignal>

#include <sys/ptrace.h>

#include "base/log.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

bool terminal_interrupts::takes(tid_t tid, int sig) const
{
    if (!ours_ || sig != SIGINT)
        return false;
    siginfo_t info{};
    if (ptrace_call(PTRACE_GETSIGINFO, tid, nullptr, &info) != 0 || info.si_code != SI_KERNEL)
        return false;
    log::debug("task {}: SIGINT from the terminal taken as the user's interrupt of tdctl, not delivered", tid.value);
    return true;
}

}  // namespace tdctl::ptrace
