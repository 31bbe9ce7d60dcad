// core/locks/lock_semaphores (the reader) against agent/lock_semaphores.c
// (the writer), both linked into this test: the agent's table lives in this
// process and is read back through this process's own memory, so the two
// sides must agree on the hash, the probing, tombstones and wrap-around.
// The agent's functions use a semaphore's address only as a key, so keys
// are made up to collide on purpose.
#include <doctest/doctest.h>

#include <semaphore.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/locks/lock_semaphores.hpp"
#include "ptrace/process_memory.hpp"
#include "tests/support/image_memory.hpp"

extern "C" {
struct tdagent_thread;
void tdagent_lock_sem_track(sem_t* s);
void tdagent_lock_sem_forget(sem_t* s);
void tdagent_lock_sem_taken(sem_t* s, const tdagent_thread* self);
int tdagent_lock_sem_releasing(sem_t* s);
extern char __tdagent_lock_sems[];
extern const std::uint32_t __tdagent_lock_sems_shape[4];
extern const std::uint64_t __tdagent_lock_sems_hash;
}

using namespace tdctl;

namespace {

// The agent's record starts with its `list` link (two pointers), then the
// TID (agent/tdagent_record.h); only `tid` is read here.
struct fake_record {
    void* next = nullptr;
    void* prev = nullptr;
    pid_t tid = 0;
    char rest[512] = {};
};

core::lock_semaphore_table this_table()
{
    core::lock_semaphore_table t;
    t.slots = target_addr{reinterpret_cast<std::uint64_t>(&__tdagent_lock_sems[0])};
    t.count = __tdagent_lock_sems_shape[0];
    t.probes = __tdagent_lock_sems_shape[1];
    t.slot_size = __tdagent_lock_sems_shape[2];
    t.holder_offset = __tdagent_lock_sems_shape[3];
    t.hash = __tdagent_lock_sems_hash;
    return t;
}

sem_t* key(std::uint64_t address)
{
    return reinterpret_cast<sem_t*>(address);
}

// `n` made-up semaphore addresses whose probes all start at slot `first`.
std::vector<std::uint64_t> colliding(const core::lock_semaphore_table& t, std::uint32_t first, std::size_t n)
{
    std::vector<std::uint64_t> keys;
    for (std::uint64_t a = 0x7f0000000000; keys.size() < n; a += 32)
        if (core::lock_semaphore_first_slot(t, target_addr{a}) == first)
            keys.push_back(a);
    return keys;
}

}  // namespace

TEST_CASE("lock semaphores: the agent's takes and posts read back as holders; untracked and forgotten ones as none")
{
    ptrace::process_memory self(::getpid());
    const auto t = this_table();
    REQUIRE(t.count == 4096);
    fake_record taker;
    taker.tid = 4242;
    sem_t real[3];
    for (auto& s : real)
        tdagent_lock_sem_track(&s);
    tdagent_lock_sem_taken(&real[1], reinterpret_cast<const tdagent_thread*>(&taker));
    auto at = [&](const void* s) { return target_addr{reinterpret_cast<std::uint64_t>(s)}; };
    CHECK(core::lock_semaphore_holder(self, t, at(&real[0])) == 0);
    CHECK(core::lock_semaphore_holder(self, t, at(&real[1])) == 4242);
    sem_t other;
    CHECK_FALSE(core::lock_semaphore_holder(self, t, at(&other)).has_value());
    CHECK(tdagent_lock_sem_releasing(&real[1]) == 1);
    CHECK(core::lock_semaphore_holder(self, t, at(&real[1])) == 0);
    CHECK(tdagent_lock_sem_releasing(&other) == 0);
    for (auto& s : real)
        tdagent_lock_sem_forget(&s);
    CHECK_FALSE(core::lock_semaphore_holder(self, t, at(&real[1])).has_value());
}

TEST_CASE("lock semaphores: colliding keys, tombstones between them, and a probe window that wraps at the end")
{
    ptrace::process_memory self(::getpid());
    const auto t = this_table();
    fake_record taker;
    for (std::uint32_t first : {100u, t.count - 3}) {
        CAPTURE(first);
        auto keys = colliding(t, first, t.probes + 1);
        for (std::size_t i = 0; i < keys.size(); ++i) {
            tdagent_lock_sem_track(key(keys[i]));
            taker.tid = static_cast<pid_t>(1000 + i);
            tdagent_lock_sem_taken(key(keys[i]), reinterpret_cast<const tdagent_thread*>(&taker));
        }
        // The window holds `probes` of them; the last found no slot.
        for (std::size_t i = 0; i + 1 < keys.size(); ++i)
            CHECK(core::lock_semaphore_holder(self, t, target_addr{keys[i]}) == static_cast<pid_t>(1000 + i));
        CHECK_FALSE(core::lock_semaphore_holder(self, t, target_addr{keys.back()}).has_value());
        // Forgotten ones leave tombstones the others are found past.
        tdagent_lock_sem_forget(key(keys[0]));
        tdagent_lock_sem_forget(key(keys[5]));
        CHECK_FALSE(core::lock_semaphore_holder(self, t, target_addr{keys[0]}).has_value());
        CHECK(core::lock_semaphore_holder(self, t, target_addr{keys[6]}) == 1006);
        CHECK(core::lock_semaphore_holder(self, t, target_addr{keys[t.probes - 1]}) ==
              static_cast<pid_t>(1000 + t.probes - 1));
        // A tombstone is taken again by the next semaphore that needs a slot.
        tdagent_lock_sem_track(key(keys.back()));
        CHECK(core::lock_semaphore_holder(self, t, target_addr{keys.back()}) == 0);
        for (auto k : keys)
            tdagent_lock_sem_forget(key(k));
    }
}

TEST_CASE("lock semaphores: a table that cannot be read is no answer")
{
    test::image_memory mem;
    core::lock_semaphore_table t;
    t.slots = target_addr{0x900000000};  // outside the image
    t.count = 4096;
    t.probes = 32;
    t.slot_size = 16;
    t.holder_offset = 8;
    t.hash = 0x9e3779b97f4a7c15ull;
    CHECK_FALSE(core::lock_semaphore_holder(mem, t, target_addr{0x1000}).has_value());
    CHECK_FALSE(core::lock_semaphore_holder(mem, t, target_addr{}).has_value());
}
