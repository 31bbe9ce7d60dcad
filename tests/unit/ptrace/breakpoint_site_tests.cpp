// Choosing a step-over from the bytes at a site (SPEC §4), and inserting and
// removing a site in a memory image.
#include <array>
#include <cstring>
#include <map>
#include <vector>

#include <doctest/doctest.h>

#include "ptrace/breakpoint_site.hpp"
#include "tests/support/image_memory.hpp"

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

using test::image_memory;

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
    change_journal journal(mem, 0);
    const std::uint64_t base = 0x101000;
    auto code = bytes({0xc3, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, 0x1f, 0x40, 0x00});
    for (std::size_t i = 0; i < code.size(); ++i)
        mem.at(base + i) = code[i];
    auto before = mem.bytes;

    breakpoint_site site(target_addr{base}, 1);
    site.insert(mem, journal);
    CHECK(site.kind() == step_over_kind::resume_in_place);
    CHECK(mem.at(base) == std::byte{0xcc});
    CHECK(mem.at(base + 1) == std::byte{0xc3});
    CHECK(site.is_inserted());
    CHECK(journal.contains(target_addr{base}));
    CHECK(site.remove(journal));
    CHECK(mem.bytes == before);
    CHECK(journal.size() == 0);
}

TEST_CASE("a site already holding int3 is refused (another debugger's breakpoint)")
{
    image_memory mem;
    change_journal journal(mem, 0);
    mem.at(0x102000) = std::byte{0xcc};
    mem.at(0x102001) = std::byte{0xc3};
    breakpoint_site site(target_addr{0x102000}, 1);
    CHECK_THROWS(site.insert(mem, journal));
    CHECK(mem.at(0x102001) == std::byte{0xc3});
    CHECK(journal.size() == 0);
}

TEST_CASE("unreadable code is an error, not a silent breakpoint")
{
    image_memory mem;
    change_journal journal(mem, 0);
    breakpoint_site site(target_addr{0x3000}, 1);
    CHECK_THROWS(site.insert(mem, journal));
    CHECK_FALSE(site.is_inserted());
}

TEST_CASE("a signal-stop site writes its flag, never the code, and puts 0 back")
{
    image_memory mem;
    change_journal journal(mem, 0);
    const std::uint64_t function = 0x104000, flag = 0x105008;
    mem.at(function) = std::byte{0xc3};
    auto before = mem.bytes;

    breakpoint_site site(target_addr{function}, stop_flag{target_addr{flag}, 23});
    site.insert(mem, journal);
    CHECK(site.kind() == step_over_kind::signal_stop);
    CHECK(site.is_inserted());
    CHECK(mem.at(flag) == std::byte{23});
    CHECK(mem.at(function) == std::byte{0xc3});
    CHECK(journal.contains(target_addr{flag}));
    CHECK_FALSE(journal.contains(target_addr{function}));
    // No code to lift for a step: both are no-ops that succeed.
    CHECK(site.lift(mem));
    CHECK(site.reinsert(mem));
    CHECK(mem.at(flag) == std::byte{23});
    CHECK(site.remove(journal));
    CHECK(mem.bytes == before);
    CHECK(journal.size() == 0);
}

TEST_CASE("a stop flag left set by a killed session is put back to 0, not to what was found")
{
    image_memory mem;
    change_journal journal(mem, 0);
    const std::uint64_t flag = 0x106000;
    mem.at(flag) = std::byte{28};  // SIGWINCH, from a session killed with its guardian
    breakpoint_site site(target_addr{0x104000}, stop_flag{target_addr{flag}, 23});
    site.insert(mem, journal);
    CHECK(mem.at(flag) == std::byte{23});
    CHECK(site.remove(journal));
    CHECK(mem.at(flag) == std::byte{0});
}

TEST_CASE("a forked child's copy gets each site's original bytes where they were patched: a stop flag's, not the code")
{
    // The child's copy was "cleaned" by writing a signal-stop site's saved
    // flag byte at the reporting function's address: its `ret` became 00,
    // and a child that reported ran into the int3 padding (SIGTRAP).
    image_memory mem;
    change_journal journal(mem, 0);
    const std::uint64_t function = 0x104000, flag = 0x105008, code = 0x104100;
    mem.at(function) = std::byte{0xc3};
    mem.at(function + 1) = std::byte{0xcc};
    mem.at(code) = std::byte{0x55};
    breakpoint_site signal_site(target_addr{function}, stop_flag{target_addr{flag}, 23});
    breakpoint_site trap_site(target_addr{code}, 0);
    signal_site.insert(mem, journal);
    trap_site.insert(mem, journal);
    CHECK(signal_site.patched_address() == target_addr{flag});
    CHECK(trap_site.patched_address() == target_addr{code});

    image_memory child = mem;  // fork: a copy with the patches
    CHECK(signal_site.restore_into(child));
    CHECK(trap_site.restore_into(child));
    CHECK(child.at(function) == std::byte{0xc3});
    CHECK(child.at(flag) == std::byte{0});
    CHECK(child.at(code) == std::byte{0x55});
    CHECK(mem.at(flag) == std::byte{23});  // the parent keeps them
    journal.forget_all();
}
