// The change journal: originals recorded before writes, restored newest
// first, guarded, never clobbering another writer; and the shared block a
// surviving process restores from after the tracer is SIGKILLed.
#include <array>
#include <csignal>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "base/change_journal.hpp"
#include "ptrace/process_memory.hpp"
#include "tests/support/image_memory.hpp"

using namespace tdctl;
using test::image_memory;

namespace {

constexpr std::uint64_t a = 0x100100, b = 0x100200, guard_at = 0x100300;

std::uint64_t read64(image_memory& m, std::uint64_t addr)
{
    std::uint64_t v = 0;
    m.read_value(target_addr{addr}, v);
    return v;
}

}  // namespace

TEST_CASE("the first original is kept and every entry goes back newest first")
{
    image_memory mem;
    mem.write_value(target_addr{a}, std::uint64_t{7});
    mem.write_value(target_addr{b}, std::uint64_t{9});
    auto before = mem.bytes;
    {
        change_journal j(mem, 0);
        CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::global_mask));
        CHECK(j.write_value(target_addr{a}, std::uint64_t{2}, change_kind::global_mask));
        CHECK(j.write_value(target_addr{b}, std::uint64_t{3}, change_kind::thread_mask));
        CHECK(read64(mem, a) == 2);
        CHECK(j.size() == 2);
        REQUIRE(j.original(target_addr{a}));
        CHECK((*j.original(target_addr{a}))[0] == std::byte{7});
        auto t = j.restore_kinds({change_kind::thread_mask});
        CHECK(t.restored == 1);
        CHECK(read64(mem, b) == 9);
        CHECK(read64(mem, a) == 2);
    }  // the destructor puts back the rest
    CHECK(mem.bytes == before);
}

TEST_CASE("a failed guard or another writer's bytes are left alone")
{
    image_memory mem;
    mem.write_value(target_addr{guard_at}, std::int32_t{1234});
    change_journal j(mem, 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable,
                        change_guard::on(target_addr{guard_at}, std::int32_t{1234})));
    CHECK(j.write_value(target_addr{b}, std::uint64_t{5}, change_kind::global_mask));
    // The thread died (tid cleared) and someone else changed the mask.
    mem.write_value(target_addr{guard_at}, std::int32_t{0});
    mem.write_value(target_addr{b}, std::uint64_t{6});
    auto t = j.restore_all();
    CHECK(t.left == 2);
    CHECK(t.restored == 0);
    CHECK(read64(mem, a) == 1);
    CHECK(read64(mem, b) == 6);
    CHECK(j.size() == 0);
}

TEST_CASE("a write cut short between the journal and the target still restores")
{
    image_memory mem;
    change_journal j(mem, 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::global_mask));
    // Journaled as 2, but the tracer died before the target saw it.
    const std::uint64_t two = 2;
    j.note(target_addr{a}, {}, std::as_bytes(std::span(&two, 1)), change_kind::global_mask);
    CHECK(read64(mem, a) == 1);
    CHECK(j.restore_all().restored == 1);
    CHECK(read64(mem, a) == 0);
}

TEST_CASE("code goes back byte by byte, also from a half-written patch")
{
    image_memory mem;
    mem.at(a) = std::byte{0xc3};
    mem.at(a + 1) = std::byte{0x90};
    change_journal j(mem, 0);
    std::array<std::byte, 2> original{std::byte{0xc3}, std::byte{0x90}};
    std::array<std::byte, 2> patch{std::byte{0xcc}, std::byte{0xc3}};
    j.note(target_addr{a}, original, patch, change_kind::code);
    mem.at(a + 1) = std::byte{0xc3};  // padding written, trap byte not yet
    CHECK(j.restore(target_addr{a}).restored == 1);
    CHECK(mem.at(a) == std::byte{0xc3});
    CHECK(mem.at(a + 1) == std::byte{0x90});
}

TEST_CASE("forget_all drops entries without writing (the image is gone)")
{
    image_memory mem;
    {
        change_journal j(mem, 0);
        CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::global_mask));
        j.forget_all();
        CHECK(j.size() == 0);
    }
    CHECK(read64(mem, a) == 1);
}

TEST_CASE("a settled entry keeps the original as the natural value and is passed by")
{
    image_memory mem;
    mem.write_value(target_addr{a}, std::uint64_t{7});
    mem.write_value(target_addr{guard_at}, std::int32_t{1234});
    change_journal j(mem, 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable,
                        change_guard::on(target_addr{guard_at}, std::int32_t{1234})));
    CHECK(j.is_active(target_addr{a}));
    CHECK(j.has_active({change_kind::thread_enable}));
    // The thread exits: its flag goes back, the entry stays for the original.
    CHECK(j.settle(target_addr{a}, true).restored == 1);
    CHECK(read64(mem, a) == 7);
    CHECK_FALSE(j.is_active(target_addr{a}));
    CHECK_FALSE(j.has_active({change_kind::thread_enable}));
    CHECK(j.size() == 1);
    REQUIRE(j.original(target_addr{a}));
    CHECK((*j.original(target_addr{a}))[0] == std::byte{7});
    CHECK(j.settle(target_addr{a}, true).restored == 0);   // already settled
    // Another thread gets the record and a value of its own: not ours.
    mem.write_value(target_addr{a}, std::uint64_t{3});
    auto t = j.restore_all();
    CHECK(t.restored + t.left + t.failed == 0);
    CHECK(read64(mem, a) == 3);
    CHECK(j.size() == 0);
}

TEST_CASE("the next write to a settled entry is a new change: the natural stays, the guard is its own")
{
    image_memory mem;
    mem.write_value(target_addr{guard_at}, std::int32_t{1234});
    change_journal j(mem, 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable,
                        change_guard::on(target_addr{guard_at}, std::int32_t{1234})));
    j.settle(target_addr{a}, false);
    mem.write_value(target_addr{a}, std::uint64_t{1});   // what the dead thread left
    mem.write_value(target_addr{guard_at}, std::int32_t{5678});  // the record's new thread
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable,
                        change_guard::on(target_addr{guard_at}, std::int32_t{5678})));
    CHECK(j.is_active(target_addr{a}));
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable));   // no guard: kept
    auto t = j.restore_all();
    CHECK(t.restored == 1);
    CHECK(read64(mem, a) == 0);   // the natural value, not the dead thread's
}

TEST_CASE("a write with a guard names whose the change is now")
{
    image_memory mem;
    mem.write_value(target_addr{guard_at}, std::int32_t{1234});
    change_journal j(mem, 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable,
                        change_guard::on(target_addr{guard_at}, std::int32_t{1234})));
    // The record passed to another thread unseen; the next write is for it.
    mem.write_value(target_addr{guard_at}, std::int32_t{5678});
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable,
                        change_guard::on(target_addr{guard_at}, std::int32_t{5678})));
    CHECK(j.restore_all().restored == 1);
    CHECK(read64(mem, a) == 0);
}

TEST_CASE("restore_to_mark puts back the values at the mark, of the kinds and addresses asked, once")
{
    constexpr std::uint64_t c = 0x100400, d = 0x100500;
    image_memory mem;
    mem.write_value(target_addr{b}, std::uint64_t{9});
    change_journal j(mem, 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::global_mask));
    CHECK_FALSE(j.has_mark());
    j.set_mark();
    CHECK(j.has_mark());
    CHECK(j.write_value(target_addr{a}, std::uint64_t{2}, change_kind::global_mask));
    CHECK(j.write_value(target_addr{a}, std::uint64_t{3}, change_kind::global_mask));
    CHECK(j.write_value(target_addr{b}, std::uint64_t{5}, change_kind::thread_enable));   // new since the mark
    CHECK(j.write_value(target_addr{c}, std::uint64_t{6}, change_kind::thread_mask));     // a kind not asked
    CHECK(j.write_value(target_addr{d}, std::uint64_t{7}, change_kind::thread_enable));   // an address not asked
    auto t = j.restore_to_mark({change_kind::global_mask, change_kind::thread_enable},
                               [&](target_addr address) { return address != target_addr{d}; });
    CHECK(t.restored == 2);
    CHECK(read64(mem, a) == 1);   // the value at the mark, not the original
    CHECK(read64(mem, b) == 9);   // the original of an entry created since
    CHECK(read64(mem, c) == 6);
    CHECK(read64(mem, d) == 7);
    CHECK_FALSE(j.has_mark());
    mem.write_value(target_addr{a}, std::uint64_t{4});
    CHECK(j.restore_to_mark({change_kind::global_mask}, [](target_addr) { return true; }).restored == 0);
    CHECK(read64(mem, a) == 4);
    // The writes back are journaled: the originals still come back.
    mem.write_value(target_addr{a}, std::uint64_t{1});
    CHECK(j.restore_all().restored == 3);
    CHECK(read64(mem, a) == 0);
    CHECK(read64(mem, b) == 9);
}

TEST_CASE("the value at the mark is the target's own: a change it made itself since the last write counts")
{
    image_memory mem;
    change_journal j(mem, 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable));
    mem.write_value(target_addr{a}, std::uint64_t{5});   // e.g. a record reset for a new thread
    j.set_mark();
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable));
    CHECK(j.restore_to_mark({change_kind::thread_enable}, [](target_addr) { return true; }).restored == 1);
    CHECK(read64(mem, a) == 5);
}

TEST_CASE("an entry settled since the mark counts as created after it; one not changed again is left")
{
    image_memory mem;
    change_journal j(mem, 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable));
    CHECK(j.write_value(target_addr{b}, std::uint64_t{1}, change_kind::thread_enable));
    j.set_mark();
    CHECK(j.write_value(target_addr{a}, std::uint64_t{2}, change_kind::thread_enable));
    j.settle(target_addr{a}, true);                    // its thread exits
    CHECK(read64(mem, a) == 0);
    CHECK(j.write_value(target_addr{a}, std::uint64_t{2}, change_kind::thread_enable));   // a thread born on it
    j.settle(target_addr{b}, true);
    mem.write_value(target_addr{b}, std::uint64_t{8});   // a new thread's own value
    auto t = j.restore_to_mark({change_kind::thread_enable}, [](target_addr) { return true; });
    CHECK(t.restored == 1);
    CHECK(read64(mem, a) == 0);   // the natural value, not 1 from before the mark
    CHECK(read64(mem, b) == 8);
}

TEST_CASE("a process that outlives the tracer passes settled slots by")
{
    journal_storage& storage = journal_storage::create_shared(64);
    image_memory mem;
    change_journal j(mem, 0);
    REQUIRE(j.is_shared());
    CHECK(j.write_value(target_addr{a}, std::uint64_t{1}, change_kind::thread_enable));
    CHECK(j.write_value(target_addr{b}, std::uint64_t{2}, change_kind::thread_mask));
    j.settle(target_addr{b}, false);
    mem.write_value(target_addr{b}, std::uint64_t{5});   // another thread's
    auto t = change_journal::restore_abandoned(storage, mem);
    CHECK(t.restored == 1);
    CHECK(t.left + t.failed + t.unchanged == 0);
    CHECK(read64(mem, a) == 0);
    CHECK(read64(mem, b) == 5);
    CHECK(storage.claimed == 0);
}

namespace {

// Lives at the same address in every process forked from this one.
volatile std::uint64_t g_target_word = 0x1111;

}  // namespace

TEST_CASE("a tracer SIGKILLed mid-session: the shared block restores the target")
{
    journal_storage& storage = journal_storage::create_shared(1024);
    const target_addr word{reinterpret_cast<std::uint64_t>(&g_target_word)};

    pid_t target = ::fork();
    REQUIRE(target >= 0);
    if (target == 0) {
        for (;;)
            ::pause();
    }
    pid_t tracer = ::fork();
    REQUIRE(tracer >= 0);
    if (tracer == 0) {
        ptrace::process_memory mem(target);
        change_journal j(mem, target);
        bool ok = j.is_shared() && j.write_value(word, std::uint64_t{0x2222}, change_kind::global_mask);
        ::kill(::getpid(), ok ? SIGKILL : SIGABRT);  // dies with the change in place
    }
    int status = 0;
    REQUIRE(::waitpid(tracer, &status, 0) == tracer);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);

    ptrace::process_memory mem(target);
    std::uint64_t now = 0;
    REQUIRE(mem.read_value(word, now));
    CHECK(now == 0x2222);
    CHECK(storage.pid == target);
    CHECK(storage.start_time == process_start_time(target));
    auto t = change_journal::restore_abandoned(storage, mem);
    CHECK(t.restored == 1);
    REQUIRE(mem.read_value(word, now));
    CHECK(now == 0x1111);
    CHECK(storage.claimed == 0);

    ::kill(target, SIGKILL);
    ::waitpid(target, &status, 0);
}
