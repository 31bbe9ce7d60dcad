// The return frame's geometry (where rt_sigreturn will look for it, what the
// callee and the red zone keep), and the search for rt_sigreturn code in
// libc, on this test process. What the frame does to a real thread is
// tested in tests/integration/xstate_restore_tests.cpp.
#include <cstring>
#include <unistd.h>

#include <doctest/doctest.h>

#include "ptrace/process_memory.hpp"
#include "ptrace/return_frame_x86_64.hpp"

using namespace tdctl;

TEST_CASE("return frame layout: below the red zone, slot 8 mod 16, FP area 64-aligned, room for rt_sigframe")
{
    constexpr std::size_t sigframe_bytes = 440;   // pretcode, ucontext (304), siginfo (128)
    for (std::uint64_t sp : {0x7ffc00001000ull, 0x7ffc00001008ull, 0x7ffc0000103full, 0x7ffc00001ff8ull}) {
        for (std::size_t fp : {std::size_t{512}, std::size_t{2696 + 4}, std::size_t{11008 + 4}}) {
            CAPTURE(sp);
            CAPTURE(fp);
            auto l = ptrace::layout_return_frame(sp, fp);
            CHECK(l.slot % 16 == 8);
            CHECK(l.fpstate % 64 == 0);
            CHECK(l.slot + sigframe_bytes <= l.fpstate);
            CHECK(l.fpstate + fp <= sp - 128);
            CHECK(l.slot + l.size == l.fpstate + fp);
            CHECK(l.size < fp + sigframe_bytes + 64 + 16 + 8);   // no more stack than alignment needs
        }
    }
}

TEST_CASE("find_sigreturn_code finds mov $15, %rax; syscall in this process's libc")
{
    ptrace::process_memory memory(::getpid());
    auto at = ptrace::find_sigreturn_code(::getpid(), memory);
    REQUIRE(at.has_value());
    const unsigned char expected[] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
    CHECK(std::memcmp(reinterpret_cast<const void*>(at->value), expected, sizeof expected) == 0);
}

TEST_CASE("find_sigreturn_code: a process without libc.so.6 gives nothing")
{
    ptrace::process_memory memory(::getpid());
    CHECK_FALSE(ptrace::find_sigreturn_code(999999999, memory).has_value());
}
