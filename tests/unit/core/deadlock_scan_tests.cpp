// The pieces of `deadlock` that need no tracee: glibc's pthread_mutex_t read
// through tdctl's layout table from real mutexes of this test process (so the
// offsets are checked against the glibc the tests run on), the owner of each
// kind, the frame classification, and the cycles of wait-for graphs.
#include <cstring>
#include <pthread.h>
#include <thread>

#include <doctest/doctest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/locks/deadlock_scan.hpp"
#include "core/locks/mutex_layout.hpp"
#include "core/locks/wait_for_graph.hpp"

using namespace tdctl;
using namespace tdctl::core;

namespace {

// This process's own memory, as target memory.
class own_memory final : public target_memory {
public:
    std::size_t read(target_addr addr, std::span<std::byte> out) override
    {
        std::memcpy(out.data(), reinterpret_cast<const void*>(addr.value), out.size());
        return out.size();
    }
    bool write(target_addr, std::span<const std::byte>) override { return false; }
};

target_addr address_of(pthread_mutex_t& m)
{
    return target_addr{reinterpret_cast<std::uint64_t>(&m)};
}

pid_t own_tid()
{
    return static_cast<pid_t>(syscall(SYS_gettid));
}

// A mutex of the given type and protocol, locked by the calling thread.
struct locked_mutex {
    pthread_mutex_t m;
    locked_mutex(int type, bool robust, int protocol)
    {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, type);
        if (robust)
            pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutexattr_setprotocol(&a, protocol);
        REQUIRE(pthread_mutex_init(&m, &a) == 0);
        pthread_mutexattr_destroy(&a);
        REQUIRE(pthread_mutex_lock(&m) == 0);
    }
    ~locked_mutex()
    {
        pthread_mutex_unlock(&m);
        pthread_mutex_destroy(&m);
    }
};

std::vector<stack_frame> frames_named(std::initializer_list<const char*> names)
{
    std::vector<stack_frame> frames;
    for (const char* n : names) {
        stack_frame f;
        f.function = n;
        frames.push_back(f);
    }
    return frames;
}

}  // namespace

TEST_CASE("the layout table matches the glibc these tests run on: a locked mutex reads back its owner and kind")
{
    own_memory mem;
    struct kind_case {
        int type;
        bool robust;
        int protocol;
        const char* name;
        const char* source;
    };
    const kind_case cases[] = {
        {PTHREAD_MUTEX_NORMAL, false, PTHREAD_PRIO_NONE, "normal", "__owner"},
        {PTHREAD_MUTEX_RECURSIVE, false, PTHREAD_PRIO_NONE, "recursive", "__owner"},
        {PTHREAD_MUTEX_ERRORCHECK, false, PTHREAD_PRIO_NONE, "errorcheck", "__owner"},
        // glibc marks robust mutexes process-shared (their futex calls are shared).
        {PTHREAD_MUTEX_NORMAL, true, PTHREAD_PRIO_NONE, "normal+robust+pshared", "futex word"},
        {PTHREAD_MUTEX_ERRORCHECK, true, PTHREAD_PRIO_NONE, "errorcheck+robust+pshared", "futex word"},
        {PTHREAD_MUTEX_NORMAL, false, PTHREAD_PRIO_INHERIT, "normal+pi", "futex word"},
        {PTHREAD_MUTEX_RECURSIVE, false, PTHREAD_PRIO_INHERIT, "recursive+pi", "futex word"},
    };
    for (const auto& c : cases) {
        INFO(c.name);
        locked_mutex lm(c.type, c.robust, c.protocol);
        auto fields = read_mutex(mem, address_of(lm.m));
        REQUIRE(fields);
        CHECK(fields->kind == lm.m.__data.__kind);
        CHECK(fields->lock == lm.m.__data.__lock);
        CHECK(fields->count == lm.m.__data.__count);
        CHECK(fields->nusers == lm.m.__data.__nusers);
        CHECK(decode_mutex_kind(fields->kind).name() == c.name);
        mutex_owner o = owner_of(*fields);
        CHECK(o.tid == own_tid());
        CHECK(std::string(o.source) == c.source);
        CHECK_FALSE(o.owner_died);
    }
}

TEST_CASE("a robust mutex whose owner exited: the kernel leaves FUTEX_OWNER_DIED and no TID in the futex word")
{
    own_memory mem;
    pthread_mutex_t m;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    REQUIRE(pthread_mutex_init(&m, &a) == 0);
    pid_t owner = 0;
    std::thread t([&] {
        owner = own_tid();
        pthread_mutex_lock(&m);   // the thread ends holding it
    });
    t.join();
    auto fields = read_mutex(mem, address_of(m));
    REQUIRE(fields);
    mutex_owner o = owner_of(*fields);
    CHECK(o.owner_died);
    CHECK(o.tid == 0);
    CHECK(owner != 0);
    CHECK(pthread_mutex_lock(&m) == EOWNERDEAD);
    pthread_mutex_consistent(&m);
    pthread_mutex_unlock(&m);
    pthread_mutex_destroy(&m);
}

TEST_CASE("frames: a mutex lock path, a join, a semaphore, a condition variable, helpers passed over, nothing known")
{
    CHECK(classify_wait_frames(frames_named({"__lll_lock_wait", "___pthread_mutex_lock", "worker"})) ==
          wait_site::mutex_lock);
    CHECK(classify_wait_frames(frames_named({"", "pthread_mutex_lock", "worker"})) == wait_site::mutex_lock);
    CHECK(classify_wait_frames(frames_named({"__futex_abstimed_wait_common", "__pthread_mutex_lock_full"})) ==
          wait_site::mutex_lock);
    CHECK(classify_wait_frames(frames_named({"__futex_abstimed_wait_common", "___pthread_cond_wait", "worker"})) ==
          wait_site::other_sync);
    CHECK(classify_wait_frames(frames_named({"__futex_abstimed_wait_common", "sem_wait"})) == wait_site::semaphore);
    CHECK(classify_wait_frames(frames_named({"__futex_abstimed_wait_common", "__new_sem_wait_slow64.constprop.0"})) ==
          wait_site::semaphore);
    CHECK(classify_wait_frames(frames_named({"__futex_abstimed_wait_common", "pthread_rwlock_wrlock"})) ==
          wait_site::other_sync);
    CHECK(classify_wait_frames(frames_named({"__futex_abstimed_wait_common", "__pthread_clockjoin_ex"})) ==
          wait_site::join);
    CHECK(classify_wait_frames(frames_named({"", "pthread_timedjoin_np", "main"})) == wait_site::join);
    CHECK(classify_wait_frames(frames_named({"__futex_abstimed_wait_common", "pthread_join", "main"})) ==
          wait_site::join);
    CHECK(classify_wait_frames(frames_named({"syscall", "my_futex_wait", "main"})) == wait_site::unknown);
    // The condvar takes its mutex back through the mutex path: a mutex wait.
    CHECK(classify_wait_frames(frames_named({"__lll_lock_wait", "__pthread_mutex_cond_lock", "___pthread_cond_wait"})) ==
          wait_site::mutex_lock);
}

TEST_CASE("wait-for graph: a 2-cycle, a 3-cycle, a chain and a self-deadlock")
{
    auto e = [](pid_t w, pid_t o) { return wait_edge{tid_t{w}, tid_t{o}}; };
    SUBCASE("two threads, each waiting for the other")
    {
        std::vector<wait_edge> edges = {e(20, 10), e(10, 20)};
        auto cycles = find_cycles(edges);
        REQUIRE(cycles.size() == 1);
        CHECK(cycles[0] == std::vector<std::size_t>{1, 0});   // from the lowest TID, 10
    }
    SUBCASE("three threads in a ring, two more waiting on the ring from outside")
    {
        std::vector<wait_edge> edges = {e(5, 3), e(1, 2), e(3, 1), e(2, 3), e(7, 5)};
        auto cycles = find_cycles(edges);
        REQUIRE(cycles.size() == 1);
        CHECK(cycles[0] == std::vector<std::size_t>{1, 3, 2});
    }
    SUBCASE("a chain ending at a thread that waits for nobody: no cycle")
    {
        CHECK(find_cycles({e(1, 2), e(2, 3), e(4, 3)}).empty());
    }
    SUBCASE("an owner that is gone (0) ends a chain")
    {
        CHECK(find_cycles({e(1, 0), e(2, 1)}).empty());
    }
    SUBCASE("a normal mutex locked twice by its owner")
    {
        auto cycles = find_cycles({e(9, 9), e(4, 9)});
        REQUIRE(cycles.size() == 1);
        CHECK(cycles[0] == std::vector<std::size_t>{0});
    }
    SUBCASE("two separate cycles, in TID order")
    {
        auto cycles = find_cycles({e(30, 31), e(31, 30), e(1, 2), e(2, 1)});
        REQUIRE(cycles.size() == 2);
        CHECK(cycles[0] == std::vector<std::size_t>{2, 3});
        CHECK(cycles[1] == std::vector<std::size_t>{0, 1});
    }
}
