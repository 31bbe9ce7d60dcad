// The loader routine (core/agent_loader_x86_64.S) run in this process as
// tdctl runs it in a target: its bytes copied into a fresh page made
// read+exec, its block (make_loader_block, as tdctl fills it) in the page
// after, a thread started on it with pthread_create. Stand-ins for dlopen,
// dlerror, close and munmap record what they were called with and whether
// the stack was aligned as the ABI wants; the routine's outcome (handle,
// error, done) is read from the block, and its end from pthread_join:
// munmap is tail-called, so the thread's return value is munmap's. Then the
// same with libc's own functions and a real library (libfx_plugin.so).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/agent_loader_routine.hpp"
#include "tests/support/fixtures.hpp"

using namespace tdctl;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t page_bytes = 4096;
constexpr std::uint64_t munmap_result = 0x6d756e6d6170;   // what the stand-in munmap returns
const char dlerror_text[] = "stand-in dlerror message";

/// What the stand-ins saw, and what they answer.
struct stand_ins {
    std::mutex lock;
    std::vector<std::pair<std::string, int>> dlopens;
    std::vector<long> closes;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> munmaps;
    int dlerrors = 0;
    int misaligned = 0;
    bool dlopen_works = true;
    link_map module{};

    void reset()
    {
        dlopens.clear();
        closes.clear();
        munmaps.clear();
        dlerrors = misaligned = 0;
        dlopen_works = true;
        module = {};
    }
} seen;

// Called first by each stand-in: its frame pointer lies 8 bytes below the
// stack pointer at its entry, so it is 16-byte aligned when the caller
// called with rsp aligned as the ABI wants (dlopen's own code relies on it).
#define NOTE_STACK()                                                            \
    do {                                                                        \
        auto fp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)); \
        asm("" : "+r"(fp));                                                     \
        if (fp % 16 != 0)                                                       \
            ++seen.misaligned;                                                  \
    } while (0)

void* fake_dlopen(const char* path, int flags)
{
    NOTE_STACK();
    std::lock_guard g(seen.lock);
    seen.dlopens.emplace_back(path, flags);
    if (!seen.dlopen_works)
        return nullptr;
    seen.module.l_name = const_cast<char*>(path);
    return &seen.module;
}

char* fake_dlerror()
{
    NOTE_STACK();
    std::lock_guard g(seen.lock);
    ++seen.dlerrors;
    return const_cast<char*>(dlerror_text);
}

int fake_close(int fd)
{
    NOTE_STACK();
    std::lock_guard g(seen.lock);
    seen.closes.push_back(fd);
    return 0;
}

std::uint64_t fake_munmap(void* at, std::size_t size)
{
    NOTE_STACK();
    std::lock_guard g(seen.lock);
    seen.munmaps.emplace_back(reinterpret_cast<std::uint64_t>(at), size);
    return munmap_result;
}

template <typename F>
std::uint64_t address_of(F* f)
{
    return reinterpret_cast<std::uint64_t>(f);
}

core::loader_calls fake_calls()
{
    return {address_of(fake_dlopen), address_of(fake_dlerror), address_of(fake_close), address_of(fake_munmap)};
}

core::loader_calls libc_calls()
{
    return {address_of(static_cast<void* (*)(const char*, int)>(::dlopen)), address_of(::dlerror),
            address_of(::close), address_of(::munmap)};
}

/// The routine's two pages and its thread, as tdctl sets them up in a target.
class routine_run {
public:
    routine_run(const core::loader_calls& calls, int memfd)
    {
        void* p = ::mmap(nullptr, 2 * page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        REQUIRE(p != MAP_FAILED);
        pages_ = static_cast<std::byte*>(p);
        auto code = core::loader_routine_code();
        REQUIRE(code.size() > 0);
        REQUIRE(code.size() <= page_bytes);
        std::memcpy(pages_, code.data(), code.size());
        REQUIRE(::mprotect(pages_, page_bytes, PROT_READ | PROT_EXEC) == 0);
        block_ = reinterpret_cast<core::loader_block*>(pages_ + page_bytes);
        *block_ = core::make_loader_block(calls, {.memfd = memfd, .base = base(), .size = 2 * page_bytes});
        routine_unmaps_ = calls.munmap == address_of(::munmap);
    }
    ~routine_run()
    {
        if (started_ && !joined_) {
            release();   // it ends within one wait
            ::pthread_join(thread_, nullptr);
        }
        if (!routine_unmaps_)
            ::munmap(pages_, 2 * page_bytes);
    }
    routine_run(const routine_run&) = delete;
    routine_run& operator=(const routine_run&) = delete;

    std::uint64_t base() const { return reinterpret_cast<std::uint64_t>(pages_); }
    core::loader_block& block() { return *block_; }

    /// Starts the thread with `traced` as tdctl leaves it (1) or as after
    /// tdctl's death (0).
    void start(std::uint64_t traced)
    {
        block_->traced = traced;
        auto* routine = reinterpret_cast<void* (*)(void*)>(pages_);
        REQUIRE(::pthread_create(&thread_, nullptr, routine, block_) == 0);
        started_ = true;
    }
    /// Waits (10 s at most) for `done`, as tdctl does.
    bool wait_done()
    {
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (word(block_->done).load() == 0) {
            if (std::chrono::steady_clock::now() > deadline)
                return false;
            std::this_thread::sleep_for(1ms);
        }
        return true;
    }
    /// Tells the routine it may end, as tdctl does once it has read the outcome.
    void release() { word(block_->traced).store(0); }
    /// Whether the thread is still there (waiting).
    bool is_running() { return ::pthread_tryjoin_np(thread_, nullptr) == EBUSY; }
    /// The thread's return value; std::nullopt when it did not end within 10 s.
    std::optional<std::uint64_t> join()
    {
        timespec until{};
        ::clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 10;
        void* result = nullptr;
        if (::pthread_timedjoin_np(thread_, &result, &until) != 0)
            return std::nullopt;
        joined_ = true;
        return reinterpret_cast<std::uint64_t>(result);
    }

private:
    static std::atomic_ref<std::uint64_t> word(std::uint64_t& w) { return std::atomic_ref<std::uint64_t>(w); }

    std::byte* pages_ = nullptr;
    core::loader_block* block_ = nullptr;
    pthread_t thread_{};
    bool started_ = false, joined_ = false, routine_unmaps_ = false;
};

constexpr int memfd_number = 42;   // close() is a stand-in: any number does

std::string read_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("the block as tdctl fills it: functions, memfd, its path and name, pages, 2,000 waits of 5 ms")
{
    auto b = core::make_loader_block(fake_calls(), {.memfd = 7, .base = 0x1000, .size = 0x2000});
    CHECK(b.dlopen == address_of(fake_dlopen));
    CHECK(b.munmap == address_of(fake_munmap));
    CHECK(std::string(b.path) == "/proc/self/fd/7");
    CHECK(std::string(b.memfd_name) == "libtdagent.so");
    CHECK(b.fd == 7);
    CHECK(b.base == 0x1000);
    CHECK(b.size == 0x2000);
    CHECK(b.traced == 0);
    CHECK(b.done == 0);
    CHECK(b.waits == 2000);
    CHECK(b.timeout.tv_sec == 0);
    CHECK(b.timeout.tv_nsec == 5'000'000);
}

TEST_CASE("dlopen of the memfd, the memfd closed, done; the routine waits while traced, then unmaps its pages "
          "and ends")
{
    seen.reset();
    routine_run run(fake_calls(), memfd_number);
    run.start(1);
    REQUIRE(run.wait_done());
    {
        std::lock_guard g(seen.lock);
        REQUIRE(seen.dlopens.size() == 1);
        CHECK(seen.dlopens[0].first == "/proc/self/fd/42");
        CHECK(seen.dlopens[0].second == RTLD_NOW);
        CHECK(seen.dlerrors == 0);
        CHECK(seen.closes == std::vector<long>{memfd_number});
        CHECK(seen.munmaps.empty());   // still waiting for tdctl
    }
    CHECK(run.block().handle == address_of(&seen.module));
    CHECK(run.block().error == 0);
    CHECK(run.is_running());
    run.release();
    CHECK(run.join() == munmap_result);
    REQUIRE(seen.munmaps.size() == 1);
    CHECK(seen.munmaps[0] == std::pair<std::uint64_t, std::uint64_t>{run.base(), 2 * page_bytes});
    CHECK(seen.misaligned == 0);
}

TEST_CASE("dlopen fails: dlerror's message in the block, the memfd closed, done")
{
    seen.reset();
    seen.dlopen_works = false;
    routine_run run(fake_calls(), memfd_number);
    run.start(1);
    REQUIRE(run.wait_done());
    CHECK(run.block().handle == 0);
    CHECK(run.block().error == address_of(dlerror_text));
    run.release();
    CHECK(run.join() == munmap_result);
    CHECK(seen.dlopens.size() == 1);
    CHECK(seen.dlerrors == 1);
    CHECK(seen.closes == std::vector<long>{memfd_number});
    CHECK(seen.munmaps.size() == 1);
    CHECK(seen.misaligned == 0);
}

TEST_CASE("traced already put back (tdctl gone): the routine loads, closes and ends without waiting")
{
    seen.reset();
    routine_run run(fake_calls(), memfd_number);
    run.block().waits = 1'000'000;   // a wait would show as a thread that does not end
    run.start(0);
    CHECK(run.join() == munmap_result);
    CHECK(run.block().done == 1);
    CHECK(run.block().waits == 1'000'000);
    CHECK(seen.dlopens.size() == 1);
    CHECK(seen.closes.size() == 1);
    CHECK(seen.munmaps.size() == 1);
    CHECK(seen.misaligned == 0);
}

TEST_CASE("nobody puts traced back: the routine ends alone after its last wait")
{
    seen.reset();
    routine_run run(fake_calls(), memfd_number);
    run.block().timeout = timespec{0, 1'000'000};
    run.block().waits = 5;
    run.start(1);
    CHECK(run.join() == munmap_result);
    CHECK(run.block().traced == 1);
    CHECK(run.block().waits == 0);   // four waits, then the fifth count ended it
    CHECK(seen.munmaps.size() == 1);
    CHECK(seen.misaligned == 0);
}

TEST_CASE("libc's own functions: a real library loaded from a memfd, the memfd closed, the pages unmapped")
{
    const std::string plugin = test::fixture_path("libfx_plugin.so");
    const std::string bytes = read_file(plugin);
    REQUIRE(!bytes.empty());
    int fd = ::memfd_create("libtdagent.so", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    routine_run run(libc_calls(), fd);
    run.start(1);
    REQUIRE(run.wait_done());
    void* handle = reinterpret_cast<void*>(run.block().handle);
    REQUIRE_MESSAGE(handle != nullptr, reinterpret_cast<const char*>(run.block().error));
    CHECK(::dlsym(handle, "fx_plugin_spawn") != nullptr);
    CHECK(std::string(static_cast<link_map*>(handle)->l_name) == "/proc/self/fd/" + std::to_string(fd));
    CHECK(::fcntl(fd, F_GETFD) == -1);   // closed by the routine
    const std::uint64_t base = run.base();
    run.release();
    CHECK(run.join() == 0);   // munmap's own result
    unsigned char resident[2];
    CHECK(::mincore(reinterpret_cast<void*>(base), 2 * page_bytes, resident) == -1);
    CHECK(errno == ENOMEM);   // both pages gone
    ::dlclose(handle);
}

TEST_CASE("libc's own functions: a file that is no library leaves dlerror's message")
{
    int fd = ::memfd_create("libtdagent.so", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "not an ELF file", 15) == 15);
    routine_run run(libc_calls(), fd);
    run.start(1);
    REQUIRE(run.wait_done());
    CHECK(run.block().handle == 0);
    REQUIRE(run.block().error != 0);
    CHECK(std::string(reinterpret_cast<const char*>(run.block().error)).find("/proc/self/fd/") != std::string::npos);
    run.release();
    CHECK(run.join() == 0);
}
