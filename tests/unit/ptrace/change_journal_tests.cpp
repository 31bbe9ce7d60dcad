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
