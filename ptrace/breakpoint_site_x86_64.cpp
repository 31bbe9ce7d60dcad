// x86_64 instruction patterns for choosing a step-over.
#include "ptrace/breakpoint_site.hpp"

namespace tdctl::ptrace {

namespace {

constexpr std::byte b(unsigned v) { return static_cast<std::byte>(v); }

// Bytes compilers and assemblers emit as inter-function padding: multi-byte
// nop prefixes/opcodes, int3 and single-byte nop.
bool is_padding_byte(std::byte x)
{
    return x == b(0x66) || x == b(0x0f) || x == b(0x90) || x == b(0xcc) || x == b(0x2e);
}

}  // namespace

step_over_kind classify_site(std::span<const std::byte> code, std::uint64_t function_size,
                             std::array<std::byte, 2>& patch, std::size_t& patch_len)
{
    patch = {b(0xcc), b(0x00)};
    patch_len = 1;
    if (code.empty())
        return step_over_kind::single_step;

    if (code[0] == b(0xc3)) {
        // The byte after a one-byte function is outside it; only then may it
        // be overwritten with the `ret` the trap will land on.
        if (function_size == 1 && code.size() >= 2 && is_padding_byte(code[1])) {
            patch = {b(0xcc), b(0xc3)};
            patch_len = 2;
            return step_over_kind::resume_in_place;
        }
        return step_over_kind::emulate_return;
    }
    // repz ret
    if (code.size() >= 2 && code[0] == b(0xf3) && code[1] == b(0xc3))
        return step_over_kind::emulate_return;
    // endbr64; ret
    if (code.size() >= 5 && code[0] == b(0xf3) && code[1] == b(0x0f) && code[2] == b(0x1e) && code[3] == b(0xfa) &&
        code[4] == b(0xc3))
        return step_over_kind::emulate_return;
    return step_over_kind::single_step;
}

}  // namespace tdctl::ptrace
