#include "ptrace/breakpoint_site.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace tdctl::ptrace {

const char* step_over_name(step_over_kind k)
{
    switch (k) {
    case step_over_kind::resume_in_place: return "resume-in-place";
    case step_over_kind::emulate_return: return "emulate-return";
    case step_over_kind::single_step: return "single-step";
    case step_over_kind::signal_stop: return "signal-stop";
    }
    return "?";
}

void breakpoint_site::insert_flag(target_memory& mem, change_journal& journal)
{
    // The natural value is 0 whatever is found: a flag left set by a tracer
    // that was killed with its guardian is put back to 0 by this session.
    const std::byte value{static_cast<unsigned char>(flag_.signo)};
    const std::byte natural{0};
    journal.note(flag_.address, std::span<const std::byte>(&natural, 1), std::span<const std::byte>(&value, 1),
                 change_kind::code);
    if (!mem.write(flag_.address, std::span<const std::byte>(&value, 1)))
        throw error::from_errno(EFAULT, fmt::format("cannot write the stop flag at {}", flag_.address));
    saved_[0] = natural;
    inserted_ = true;
}

void breakpoint_site::insert(target_memory& mem, change_journal& journal)
{
    if (inserted_)
        return;
    if (kind_ == step_over_kind::signal_stop) {
        insert_flag(mem, journal);
        return;
    }
    std::array<std::byte, 16> code{};
    std::size_t n = mem.read(addr_, code);
    if (n == 0)
        throw error::from_errno(EFAULT, fmt::format("cannot read code at {}", addr_));
    if (code[0] == std::byte{0xcc})
        throw error::target(fmt::format("code at {} already holds a breakpoint (another debugger?)", addr_));
    kind_ = classify_site(std::span<const std::byte>(code.data(), n), function_size_, patch_, patch_len_);
    std::copy_n(code.begin(), patch_len_, saved_.begin());
    journal.note(addr_, std::span<const std::byte>(saved_.data(), patch_len_),
                 std::span<const std::byte>(patch_.data(), patch_len_), change_kind::code, std::nullopt,
                 kind_ == step_over_kind::resume_in_place ? journal_slot::landing_tail : 0);
    // Padding byte first: the trap byte must never precede the ret it lands on.
    if (patch_len_ == 2 && !mem.write(addr_ + 1, std::span<const std::byte>(&patch_[1], 1)))
        throw error::from_errno(EFAULT, fmt::format("cannot write breakpoint at {}", addr_));
    if (!mem.write(addr_, std::span<const std::byte>(&patch_[0], 1)))
        throw error::from_errno(EFAULT, fmt::format("cannot write breakpoint at {}", addr_));
    inserted_ = true;
}

bool breakpoint_site::remove(change_journal& journal)
{
    if (!inserted_)
        return true;
    inserted_ = false;
    return journal.restore(kind_ == step_over_kind::signal_stop ? flag_.address : addr_).failed == 0;
}

bool breakpoint_site::lift(target_memory& mem)
{
    if (kind_ == step_over_kind::signal_stop)
        return true;  // no code of ours to lift
    return mem.write(addr_, std::span<const std::byte>(&saved_[0], 1));
}

bool breakpoint_site::reinsert(target_memory& mem)
{
    if (kind_ == step_over_kind::signal_stop)
        return true;
    return mem.write(addr_, std::span<const std::byte>(&patch_[0], 1));
}

std::string breakpoint_site::describe() const
{
    if (kind_ == step_over_kind::signal_stop)
        return fmt::format("{} [stop flag at {} = signal {}] {}", addr_, flag_.address, flag_.signo,
                           step_over_name(kind_));
    std::string bytes;
    for (std::size_t i = 0; i < patch_len_; ++i)
        bytes += fmt::format("{}{:02x}", i ? " " : "", static_cast<unsigned>(saved_[i]));
    return fmt::format("{} [{}] {}", addr_, bytes, step_over_name(kind_));
}

}  // namespace tdctl::ptrace
