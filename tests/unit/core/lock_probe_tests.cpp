// core/lock_probe on canned stacks and a memory image: no target.
#include <doctest/doctest.h>

#include <cstddef>
#include <pthread.h>

#include "core/lock_probe.hpp"
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

}  // namespace

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
