// core/lock_probe on canned stacks, a memory image and this process's own
// modules: no target.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdio>
#include <pthread.h>
#include <unistd.h>

#include "core/locks/lock_probe.hpp"
#include "tests/support/image_memory.hpp"

using namespace tdctl;
using events::lock_kind;
using events::stack_frame;

namespace {

std::vector<stack_frame> stack_of(std::initializer_list<const char*> functions)
{
    std::vector<stack_frame> frames;
    for (const char* f : functions)
        frames.push_back(stack_frame{target_addr{0x1000}, f, 0, "libtdagent.so", "", 0});
    return frames;
}

// Functions AddressSanitizer does not intercept, so their addresses are libc's
// in both builds.
std::uint64_t code_address(const void* f)
{
    return reinterpret_cast<std::uint64_t>(f);
}

// A function of the test executable itself.
__attribute__((noinline)) int local_function(int x)
{
    return x + 1;
}

}  // namespace

TEST_CASE("drop_reporter_frames: every frame of frame 0's module goes from the top, by address, not by name")
{
    auto modules = symbols::module_set::load(::getpid());
    const std::uint64_t in_libc_0 = code_address(reinterpret_cast<const void*>(&::getpid));
    const std::uint64_t in_libc_1 = code_address(reinterpret_cast<const void*>(&::getppid)) + 5;
    const std::uint64_t in_exe = code_address(reinterpret_cast<const void*>(&local_function)) + 3;
    const std::uint64_t in_libc_2 = code_address(reinterpret_cast<const void*>(&::getuid)) + 7;
    REQUIRE(modules.containing(target_addr{in_libc_0}) != nullptr);
    REQUIRE(modules.containing(target_addr{in_libc_0}) == modules.containing(target_addr{in_libc_1}));
    REQUIRE(modules.containing(target_addr{in_exe}) == modules.main_executable());

    // Names that look like the program's or like nobody's do not matter.
    std::vector<stack_frame> frames{{target_addr{in_libc_0}, "main", 0, "", "", 0},
                                    {target_addr{in_libc_1}, "", 0, "", "", 0},
                                    {target_addr{in_exe}, "__tdagent_event_sleep", 0, "libtdagent.so", "", 0},
                                    {target_addr{in_libc_2}, "getuid", 0, "libc.so.6", "", 0}};
    core::drop_reporter_frames(frames, modules);
    REQUIRE(frames.size() == 2);
    CHECK(frames[0].pc.value == in_exe);
    CHECK(frames[1].pc.value == in_libc_2);  // below the program: kept

    // Frame 0 in no module: nothing is dropped.
    std::vector<stack_frame> unknown{{target_addr{0x10}, "", 0, "", "", 0}, {target_addr{in_libc_1}, "", 0, "", "", 0}};
    core::drop_reporter_frames(unknown, modules);
    CHECK(unknown.size() == 2);

    // A stack wholly inside the reporting module leaves nothing.
    std::vector<stack_frame> inside{{target_addr{in_libc_0}, "", 0, "", "", 0}, {target_addr{in_libc_1}, "", 0, "", "", 0}};
    core::drop_reporter_frames(inside, modules);
    CHECK(inside.empty());
}

TEST_CASE("lock_kind_of: the first frame naming a lock call, past the reporting function")
{
    CHECK(core::lock_kind_of(stack_of({"__tdagent_event_sleep", "tdagent_report", "mutex_lock_reporting", "f"})) ==
          lock_kind::mutex);
    CHECK(core::lock_kind_of(stack_of({"__tdagent_event_sleep", "report_contended_lock", "rwlock_reporting"})) ==
          lock_kind::rwlock);
    CHECK(core::lock_kind_of(stack_of({"__tdagent_event_sleep", "spin_lock_reporting", "mutex_user"})) ==
          lock_kind::spin);
    CHECK(core::lock_kind_of(stack_of({"__tdagent_event_sleep"})) == lock_kind::unknown);
    CHECK(core::lock_kind_of({}) == lock_kind::unknown);
}

TEST_CASE("lock_owner_of: glibc's __owner at 8 of a mutex, __cur_writer at 24 of an rwlock")
{
    // The offsets are the installed headers' (bits/struct_mutex.h, bits/struct_rwlock.h).
    static_assert(offsetof(pthread_mutex_t, __data.__owner) == core::mutex_owner_offset);
    static_assert(offsetof(pthread_rwlock_t, __data.__cur_writer) == core::rwlock_writer_offset);
    test::image_memory mem;
    const target_addr lock{mem.base + 0x100};
    CHECK_FALSE(core::lock_owner_of(mem, lock, lock_kind::mutex).has_value());  // free: __owner 0
    REQUIRE(mem.write_value(target_addr{lock.value + 8}, std::int32_t{4321}));
    CHECK(core::lock_owner_of(mem, lock, lock_kind::mutex) == 4321);
    CHECK_FALSE(core::lock_owner_of(mem, lock, lock_kind::rwlock).has_value());  // its 24 is still 0
    CHECK_FALSE(core::lock_owner_of(mem, lock, lock_kind::spin).has_value());
    CHECK_FALSE(core::lock_owner_of(mem, lock, lock_kind::unknown).has_value());
    REQUIRE(mem.write_value(target_addr{lock.value + 24}, std::int32_t{99}));
    CHECK(core::lock_owner_of(mem, lock, lock_kind::rwlock) == 99);
    // A robust mutex whose owner died: FUTEX_OWNER_DIED is not part of the TID.
    REQUIRE(mem.write_value(target_addr{lock.value + 8}, std::int32_t{0x40000000 | 4321}));
    CHECK(core::lock_owner_of(mem, lock, lock_kind::mutex) == 4321);
    CHECK_FALSE(core::lock_owner_of(mem, target_addr{0x10}, lock_kind::mutex).has_value());  // unmapped
    CHECK_FALSE(core::lock_owner_of(mem, target_addr{}, lock_kind::mutex).has_value());
}
