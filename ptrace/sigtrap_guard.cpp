#include "ptrace/sigtrap_guard.hpp"

#include <csignal>
#include <cstdlib>
#include <string_view>
#include <fcntl.h>

#include <fmt/format.h>

#include "base/log.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

namespace {

constexpr std::uint64_t sigtrap_bit = std::uint64_t{1} << (SIGTRAP - 1);

// The kernel's sigset for PTRACE_GET/SETSIGMASK: 8 bytes on x86-64.
void* mask_size() { return reinterpret_cast<void*>(sizeof(std::uint64_t)); }

// The hex mask after `label` in /proc/PID/status text; all ones when the
// line is missing (then SIGTRAP counts as handled: guarded).
std::uint64_t mask_field(std::string_view text, std::string_view label)
{
    std::size_t at = text.find(label);
    if (at == std::string_view::npos)
        return ~std::uint64_t{0};
    return std::strtoull(text.data() + at + label.size(), nullptr, 16);
}

}  // namespace

bool sigtrap_guard::program_handles_sigtrap()
{
    if (!status_fd_.is_open())
        status_fd_.reset(::open(fmt::format("/proc/{}/status", pid_).c_str(), O_RDONLY | O_CLOEXEC));
    auto text = status_fd_.is_open() ? procfs::read_fd(status_fd_.get(), procfs::proc_records::one) : std::nullopt;
    if (!text)
        return true;  // cannot tell: guard anyway
    return ((mask_field(*text, "\nSigCgt:") | mask_field(*text, "\nSigIgn:")) & sigtrap_bit) != 0;
}

void sigtrap_guard::open_window(task& parent)
{
    if (!program_handles_sigtrap())
        return;
    std::uint64_t mask = 0;
    if (ptrace_call(PTRACE_GETSIGMASK, parent.tid(), mask_size(), &mask) != 0)
        return;
    // Still the mask this guard set at an earlier clone (no pthread_create
    // restored its own since): that window is still open.
    if (parent.mask_before_trap && mask == (*parent.mask_before_trap & ~sigtrap_bit))
        return;
    parent.mask_before_trap.reset();
    if ((mask & sigtrap_bit) == 0)
        return;
    std::uint64_t open = mask & ~sigtrap_bit;
    if (ptrace_call(PTRACE_SETSIGMASK, parent.tid(), mask_size(), &open) != 0)
        return;
    parent.mask_before_trap = mask;
    log::debug("task {}: SIGTRAP unblocked until its trap (the program handles SIGTRAP)", parent.tid().value);
}

void sigtrap_guard::put_back(task& t)
{
    if (!t.mask_before_trap)
        return;
    const std::uint64_t saved = *t.mask_before_trap;
    t.mask_before_trap.reset();
    // Only while the mask is still the one set here: a creator that did not
    // trap (its reporting off, or no create site) has had its own mask put
    // back by pthread_create since, and that one stays.
    std::uint64_t now = 0;
    if (ptrace_call(PTRACE_GETSIGMASK, t.tid(), mask_size(), &now) != 0 || now != (saved & ~sigtrap_bit))
        return;
    std::uint64_t mask = saved;
    ptrace_call(PTRACE_SETSIGMASK, t.tid(), mask_size(), &mask);
}

}  // namespace tdctl::ptrace
