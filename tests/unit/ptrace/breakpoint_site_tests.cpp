// Choosing a step-over from the bytes at a site (SPEC §4), and inserting and
// removing a site in a memory image.
#include <array>
#include <cstring>
#include <map>
#include <vector>

#include <doctest/doctest.h>

#include "ptrace/breakpoint_site.hpp"

using namespace tdctl;
using namespace tdctl::ptrace;

namespace {

std::vector<std::byte> bytes(std::initializer_list<unsigned> v)
{
    std::vector<std::byte> out;
    for (unsigned x : v)
        out.push_back(static_cast<std::byte>(x));
    return out;
}

// A flat memory image standing in for the target.
class image_memory final : public target_memory {
public:
    std::map<std::uint64_t, std::byte> bytes;
    std::size_t read(target_addr addr, std::span<std::byte> out) override
    {
        std::size_t n = 0;
        for (; n < out.size(); ++n) {
            auto it = bytes.find(addr.value + n);
            if (it == bytes.end())
                break;
            out[n] = it->second;
        }
        return n;
    }
    bool write(target_addr addr, std::span<const std::byte> in) override
    {
        for (std::size_t i = 0; i < in.size(); ++i) {
            if (!bytes.contains(addr.value + i))
                return false;
            bytes[addr.value + i] = in[i];
        }
        return true;
    }
};

}  // namespace

TEST_CASE("glibc 2.36 __nptl_create_event: ret + nop padding, size 1 -> cc c3")
{
    auto code = bytes({0xc3, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00});
    std::array<std::byte, 2> patch{};
    std::size_t len = 0;
    CHECK(classify_site(code, 1, patch, len) == step_over_kind::resume_in_place);
    CHECK(len == 2);
    CHECK(patch[0] == std::byte{0xcc});
    CHECK(patch[1] == std::byte{0xc3});
}

TEST_CASE("ret whose next byte may be reachable -> emulated return")
{
    std::array<std::byte, 2> patch{};
    std::size_t len = 0;
    // Unknown function size: the next byte might start another function.
    CHECK(classify_site(bytes({0xc3, 0x66, 0x90}), 0, patch, len) == step_over_kind::emulate_return);
    CHECK(len == 1);
    // Size 1 but the next byte is code, not padding.
    CHECK(classify_site(bytes({0xc3, 0x55, 0x48}), 1, patch, len) == step_over_kind::emulate_return);
    // endbr64; ret and repz ret.
    CHECK(classify_site(bytes({0xf3, 0x0f, 0x1e, 0xfa, 0xc3, 0x90}), 5, patch, len) == step_over_kind::emulate_return);
    CHECK(classify_site(bytes({0xf3, 0xc3, 0x90}), 2, patch, len) == step_over_kind::emulate_return);
}

TEST_CASE("anything else -> single-step")
{
    std::array<std::byte, 2> patch{};
    std::size_t len = 0;
    CHECK(classify_site(bytes({0x55, 0x48, 0x89, 0xe5}), 30, patch, len) == step_over_kind::single_step);
    CHECK(classify_site(bytes({0xf3, 0x0f, 0x1e, 0xfa, 0x55}), 30, patch, len) == step_over_kind::single_step);
    CHECK(classify_site({}, 0, patch, len) == step_over_kind::single_step);
}

TEST_CASE("insert writes the patch and remove puts every byte back")
{
    image_memory mem;
    const std::uint64_t base = 0x1000;
    auto code = bytes({0xc3, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, 0x1f, 0x40, 0x00});
    for (std::size_t i = 0; i < code.size(); ++i)
        mem.bytes[base + i] = code[i];
    auto before = mem.bytes;

    breakpoint_site site(target_addr{base}, 1);
    site.insert(mem);
    CHECK(site.kind() == step_over_kind::resume_in_place);
    CHECK(mem.bytes[base] == std::byte{0xcc});
    CHECK(mem.bytes[base + 1] == std::byte{0xc3});
    CHECK(site.is_inserted());
    CHECK(site.remove(mem));
    CHECK(mem.bytes == before);
}

TEST_CASE("a site already holding int3 is refused (another debugger's breakpoint)")
{
    image_memory mem;
    mem.bytes[0x2000] = std::byte{0xcc};
    mem.bytes[0x2001] = std::byte{0xc3};
    breakpoint_site site(target_addr{0x2000}, 1);
    CHECK_THROWS(site.insert(mem));
    CHECK(mem.bytes[0x2001] == std::byte{0xc3});
}

TEST_CASE("unreadable code is an error, not a silent breakpoint")
{
    image_memory mem;
    breakpoint_site site(target_addr{0x3000}, 1);
    CHECK_THROWS(site.insert(mem));
    CHECK_FALSE(site.is_inserted());
}
