// The loader routine (core/inject/agent_loader_x86_64.S) run in this process as
// tdctl runs it in a target: its bytes copied into a fresh page made
// read+exec, its block (make_loader_block, as tdctl fills it) in the page
// after, a thread started on it with pthread_create. Stand-ins for dlopen,
// dlerror, close, strdup and munmap record what they were called with and
// whether the stack was aligned as the ABI wants; the routine's outcome
// (handle, error, done, the module's name in its link map) is read from the
// block, and its end from pthread_join: munmap is tail-called, so the
// thread's return value is munmap's. Then the same with libc's own functions
// and a real library (libfx_plugin.so), from its file and from a memfd.
#include <doctest/doctest.h>

#include <algorithm>
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

#include "core/inject/agent_loader_routine.hpp"
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
    std::vector<std::string> strdups;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> munmaps;
    int dlerrors = 0;
    int misaligned = 0;
    // Answers: which dlopen succeeds (the own file's, the memfd's), and
    // whether strdup does.
    bool own_file_loads = true, memfd_loads = true, strdup_works = true;
    link_map module{};
    char copy[64] = {};

    void reset()
    {
        dlopens.clear();
        closes.clear();
        strdups.clear();
        munmaps.clear();
        dlerrors = misaligned = 0;
        own_file_loads = memfd_loads = strdup_works = true;
        module = {};
        std::memset(copy, 0, sizeof copy);
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
    const bool memfd = std::string_view(path).starts_with("/proc/self/fd/");
    if (memfd ? !seen.memfd_loads : !seen.own_file_loads)
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

char* fake_strdup(const char* s)
{
    NOTE_STACK();
    std::lock_guard g(seen.lock);
    seen.strdups.emplace_back(s);
    if (!seen.strdup_works)
        return nullptr;
    std::strncpy(seen.copy, s, sizeof seen.copy - 1);
    return seen.copy;
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
    return {address_of(fake_dlopen), address_of(fake_dlerror), address_of(fake_close), address_of(fake_munmap),
            address_of(fake_strdup)};
}

core::loader_calls libc_calls()
{
    return {address_of(static_cast<void* (*)(const char*, int)>(::dlopen)), address_of(::dlerror),
            address_of(::close), address_of(::munmap), address_of(::strdup)};
}

/// The routine's two pages and its thread, as tdctl sets them up in a target.
class routine_run {
public:
    routine_run(const core::loader_calls& calls, int memfd, std::string_view own_path)
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
        *block_ = core::make_loader_block(
            calls, {.memfd = memfd, .own_path = own_path, .base = base(), .size = 2 * page_bytes});
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
const std::string own_path = "/opt/tdctl/lib/libtdagent.so";
const std::string memfd_path = "/proc/self/fd/42";
const std::string memfd_name = "/memfd:libtdagent.so (deleted)";

std::string read_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("the block as tdctl fills it: functions, memfd, paths and name, pages, 2,000 waits of 5 ms")
{
    auto b = core::make_loader_block(fake_calls(), {.memfd = 7, .own_path = own_path, .base = 0x1000, .size = 0x2000});
    CHECK(b.dlopen == address_of(fake_dlopen));
    CHECK(b.strdup == address_of(fake_strdup));
    CHECK(b.munmap == address_of(fake_munmap));
    CHECK(std::string(b.fd_path) == "/proc/self/fd/7");
    CHECK(std::string(b.path) == own_path);
    CHECK(std::string(b.module_name) == memfd_name);
    CHECK(std::string(b.memfd_name) == "libtdagent.so");
    CHECK(b.fd == 7);
    CHECK(b.base == 0x1000);
    CHECK(b.size == 0x2000);
    CHECK(b.traced == 0);
    CHECK(b.done == 0);
    CHECK(b.waits == 2000);
    CHECK(b.timeout.tv_sec == 0);
    CHECK(b.timeout.tv_nsec == 5'000'000);
    const std::string too_long(sizeof b.path, 'x');
    CHECK_FALSE(core::loader_path_fits(too_long));
    CHECK(core::loader_path_fits(std::string(sizeof b.path - 1, 'x')));
    auto c = core::make_loader_block(fake_calls(), {.memfd = 7, .own_path = too_long, .base = 0, .size = 0});
    CHECK(c.path[0] == '\0');
}

TEST_CASE("the agent's own file: dlopen of its path, its name kept, the memfd closed, done; the routine waits "
          "while traced, then unmaps its pages and ends")
{
    seen.reset();
    routine_run run(fake_calls(), memfd_number, own_path);
    run.start(1);
    REQUIRE(run.wait_done());
    {
        std::lock_guard g(seen.lock);
        REQUIRE(seen.dlopens.size() == 1);
        CHECK(seen.dlopens[0].first == own_path);
        CHECK(seen.dlopens[0].second == RTLD_NOW);
        CHECK(seen.strdups.empty());
        CHECK(seen.dlerrors == 0);
        CHECK(seen.closes == std::vector<long>{memfd_number});
        CHECK(seen.munmaps.empty());   // still waiting for tdctl
    }
    CHECK(run.block().handle == address_of(&seen.module));
    CHECK(run.block().error == 0);
    CHECK(std::string(seen.module.l_name) == own_path);
    CHECK(run.is_running());
    run.release();
    CHECK(run.join() == munmap_result);
    REQUIRE(seen.munmaps.size() == 1);
    CHECK(seen.munmaps[0] == std::pair<std::uint64_t, std::uint64_t>{run.base(), 2 * page_bytes});
    CHECK(seen.misaligned == 0);
}

TEST_CASE("the own file does not load: the memfd is loaded, and named as /proc/PID/maps names it")
{
    seen.reset();
    seen.own_file_loads = false;
    routine_run run(fake_calls(), memfd_number, own_path);
    run.start(1);
    REQUIRE(run.wait_done());
    {
        std::lock_guard g(seen.lock);
        REQUIRE(seen.dlopens.size() == 2);
        CHECK(seen.dlopens[0].first == own_path);
        CHECK(seen.dlopens[1].first == memfd_path);
        CHECK(seen.dlopens[1].second == RTLD_NOW);
        CHECK(seen.strdups == std::vector<std::string>{memfd_name});
        CHECK(seen.dlerrors == 0);
        CHECK(seen.closes == std::vector<long>{memfd_number});
    }
    CHECK(run.block().handle == address_of(&seen.module));
    CHECK(run.block().error == 0);
    CHECK(seen.module.l_name == seen.copy);   // the copy strdup returned
    run.release();
    CHECK(run.join() == munmap_result);
    CHECK(seen.munmaps.size() == 1);
    CHECK(seen.misaligned == 0);
}

TEST_CASE("no own file: only the memfd is loaded; without memory for the new name the module keeps its own")
{
    seen.reset();
    seen.strdup_works = false;
    routine_run run(fake_calls(), memfd_number, "");
    run.start(1);
    REQUIRE(run.wait_done());
    CHECK(run.block().handle == address_of(&seen.module));
    CHECK(std::string(seen.module.l_name) == memfd_path);
    run.release();
    CHECK(run.join() == munmap_result);
    REQUIRE(seen.dlopens.size() == 1);
    CHECK(seen.dlopens[0].first == memfd_path);
    CHECK(seen.strdups.size() == 1);
    CHECK(seen.closes == std::vector<long>{memfd_number});
    CHECK(seen.munmaps.size() == 1);
    CHECK(seen.misaligned == 0);
}

TEST_CASE("neither loads: dlerror's message in the block, no name given, the memfd closed, done")
{
    seen.reset();
    seen.own_file_loads = seen.memfd_loads = false;
    routine_run run(fake_calls(), memfd_number, own_path);
    run.start(1);
    REQUIRE(run.wait_done());
    CHECK(run.block().handle == 0);
    CHECK(run.block().error == address_of(dlerror_text));
    run.release();
    CHECK(run.join() == munmap_result);
    CHECK(seen.dlopens.size() == 2);
    CHECK(seen.dlerrors == 1);
    CHECK(seen.strdups.empty());
    CHECK(seen.closes == std::vector<long>{memfd_number});
    CHECK(seen.munmaps.size() == 1);
    CHECK(seen.misaligned == 0);
}

TEST_CASE("traced already put back (tdctl gone): the routine loads, closes and ends without waiting")
{
    seen.reset();
    routine_run run(fake_calls(), memfd_number, own_path);
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
    routine_run run(fake_calls(), memfd_number, own_path);
    run.block().timeout = timespec{0, 1'000'000};
    run.block().waits = 5;
    run.start(1);
    CHECK(run.join() == munmap_result);
    CHECK(run.block().traced == 1);
    CHECK(run.block().waits == 0);   // four waits, then the fifth count ended it
    CHECK(seen.munmaps.size() == 1);
    CHECK(seen.misaligned == 0);
}

TEST_CASE("libc's own functions: a real library loaded from its file, the descriptor closed, the pages unmapped")
{
    const std::string plugin = test::fixture_path("libfx_plugin.so");
    REQUIRE(::access(plugin.c_str(), R_OK) == 0);
    REQUIRE(::dlopen(plugin.c_str(), RTLD_NOW | RTLD_NOLOAD) == nullptr);
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    routine_run run(libc_calls(), fd, plugin);
    run.start(1);
    REQUIRE(run.wait_done());
    void* handle = reinterpret_cast<void*>(run.block().handle);
    REQUIRE_MESSAGE(handle != nullptr, reinterpret_cast<const char*>(run.block().error));
    CHECK(::dlopen(plugin.c_str(), RTLD_NOW | RTLD_NOLOAD) == handle);   // loaded from its own path
    ::dlclose(handle);   // that second reference
    CHECK(std::string(static_cast<link_map*>(handle)->l_name) == plugin);
    CHECK(::fcntl(fd, F_GETFD) == -1);   // closed by the routine
    const std::uint64_t base = run.base();
    run.release();
    CHECK(run.join() == 0);   // munmap's own result
    unsigned char resident[2];
    CHECK(::mincore(reinterpret_cast<void*>(base), 2 * page_bytes, resident) == -1);
    CHECK(errno == ENOMEM);   // both pages gone
    ::dlclose(handle);
}

namespace {

// libc's strdup, noting the module's name before the routine replaces it,
// so that the test can put it back and dlclose free what the loader owns.
char* name_before = nullptr;
core::loader_block* block_of_strdup = nullptr;

char* noting_strdup(const char* s)
{
    name_before = reinterpret_cast<link_map*>(block_of_strdup->handle)->l_name;
    return ::strdup(s);
}

}  // namespace

TEST_CASE("libc's own functions: a real library loaded from a memfd, renamed in its link map, the pages unmapped")
{
    const std::string plugin = test::fixture_path("libfx_plugin.so");
    const std::string bytes = read_file(plugin);
    REQUIRE(!bytes.empty());
    int fd = ::memfd_create("libtdagent.so", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    core::loader_calls calls = libc_calls();
    calls.strdup = address_of(noting_strdup);
    routine_run run(calls, fd, "/nonexistent/libtdagent.so");   // a path that fails: the memfd is loaded
    block_of_strdup = &run.block();
    name_before = nullptr;
    run.start(1);
    REQUIRE(run.wait_done());
    void* handle = reinterpret_cast<void*>(run.block().handle);
    REQUIRE_MESSAGE(handle != nullptr, reinterpret_cast<const char*>(run.block().error));
    // The handle is the module's link map, which the routine wrote through.
    link_map* map = nullptr;
    REQUIRE(::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0);
    CHECK(map == handle);
    CHECK(::dlsym(handle, "fx_plugin_spawn") != nullptr);
    CHECK(std::string(map->l_name) == memfd_name);
    REQUIRE(name_before != nullptr);
    CHECK(std::string(name_before) == "/proc/self/fd/" + std::to_string(fd));
    // dl_iterate_phdr, as a debugger or an unwinder in the process sees it.
    struct names {
        std::vector<std::string> all;
    } found;
    ::dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
            static_cast<names*>(data)->all.emplace_back(info->dlpi_name);
            return 0;
        },
        &found);
    CHECK(std::count(found.all.begin(), found.all.end(), memfd_name) == 1);
    CHECK(::fcntl(fd, F_GETFD) == -1);
    const std::uint64_t base = run.base();
    run.release();
    CHECK(run.join() == 0);
    unsigned char resident[2];
    CHECK(::mincore(reinterpret_cast<void*>(base), 2 * page_bytes, resident) == -1);
    std::free(map->l_name);
    map->l_name = name_before;
    ::dlclose(handle);
}

TEST_CASE("libc's own functions: a file that is no library leaves dlerror's message")
{
    int fd = ::memfd_create("libtdagent.so", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "not an ELF file", 15) == 15);
    routine_run run(libc_calls(), fd, "");
    run.start(1);
    REQUIRE(run.wait_done());
    CHECK(run.block().handle == 0);
    REQUIRE(run.block().error != 0);
    CHECK(std::string(reinterpret_cast<const char*>(run.block().error)).find("/proc/self/fd/") != std::string::npos);
    run.release();
    CHECK(run.join() == 0);
}
