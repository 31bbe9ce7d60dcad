#include "core/inject/agent_loader.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "core/inject/agent_loader_routine.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/return_frame_x86_64.hpp"

namespace tdctl::core {

using ptrace::stop_event;
using ptrace::stop_kind;

namespace {

constexpr std::string_view libc_module = "libc.so.6";
constexpr std::string_view loader_module = "ld-linux-x86-64.so.2";
constexpr int consistency_tries = 5;
constexpr int consistency_pause_ms = 20;
// Generous: the other threads run meanwhile, and a call may wait for a lock
// one of them holds.
constexpr int call_timeout_ms = 30000;
constexpr double dlopen_limit_seconds = 10.0;
constexpr std::uint64_t page_bytes = 4096;
// Two pages: the loader routine (made read+exec) and its control block (read+write).
constexpr std::uint64_t mapping_bytes = 2 * page_bytes;
static_assert(sizeof(loader_block) == page_bytes);

/// libc functions the load calls, by address in the target.
struct libc_functions {
    target_addr mmap, mprotect, munmap, memfd_create, close, pthread_create, pthread_detach, dlopen, dlerror, strdup;
};

bool cancelled(int cancel_fd)
{
    if (cancel_fd < 0)
        return false;
    pollfd p{cancel_fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
}

std::vector<std::byte> read_whole_file(int fd, const std::string& path)
{
    std::vector<std::byte> bytes;
    std::array<std::byte, 65536> chunk;
    for (;;) {
        ssize_t n = ::read(fd, chunk.data(), chunk.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw error::from_errno(errno, fmt::format("cannot read the agent {}", path));
        if (n == 0)
            return bytes;
        bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
    }
}

std::optional<std::string> read_target_string(target_memory& mem, target_addr at, std::size_t max)
{
    std::string s(max, '\0');
    std::size_t n = mem.read(at, std::as_writable_bytes(std::span<char>(s)));
    s.resize(n);
    if (auto nul = s.find('\0'); nul != std::string::npos) {
        s.resize(nul);
        return s;
    }
    return std::nullopt;
}

}  // namespace

int hijack_rank(long syscall_number, std::uint64_t futex_op, bool restartable, bool pc_in_libc)
{
    if (syscall_number == -1)
        return pc_in_libc ? 4 : 2;
    if (!restartable)
        return 5;
    if (syscall_number != SYS_futex)
        return 0;
    constexpr std::uint64_t command_mask = ~std::uint64_t{FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME};
    return (futex_op & command_mask) == FUTEX_WAIT_BITSET ? 1 : 3;
}

std::optional<int> seccomp_mode_of(std::string_view text)
{
    constexpr std::string_view key = "\nSeccomp:";
    auto at = text.find(key);
    if (at == std::string_view::npos)
        return std::nullopt;
    std::string_view rest = text.substr(at + key.size());
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
        rest.remove_prefix(1);
    int mode = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), mode);
    if (ec != std::errc{})
        return std::nullopt;
    return mode;
}

std::optional<std::string> elf_string_at(const std::vector<std::byte>& image, std::uint64_t vaddr)
{
    if (image.size() < sizeof(Elf64_Ehdr))
        return std::nullopt;
    Elf64_Ehdr eh;
    std::memcpy(&eh, image.data(), sizeof eh);
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
        std::uint64_t at = eh.e_phoff + std::uint64_t{i} * eh.e_phentsize;
        if (at + sizeof(Elf64_Phdr) > image.size())
            return std::nullopt;
        Elf64_Phdr ph;
        std::memcpy(&ph, image.data() + at, sizeof ph);
        if (ph.p_type != PT_LOAD || vaddr < ph.p_vaddr || vaddr >= ph.p_vaddr + ph.p_filesz)
            continue;
        std::uint64_t off = ph.p_offset + (vaddr - ph.p_vaddr);
        const char* begin = reinterpret_cast<const char*>(image.data()) + off;
        std::size_t room = image.size() - off;
        std::size_t len = strnlen(begin, room);
        if (len == room)
            return std::nullopt;
        return std::string(begin, len);
    }
    return std::nullopt;
}

agent_file agent_file::read(const std::string& path)
{
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!fd.is_open() || ::fstat(fd.get(), &st) != 0)
        throw error::from_errno(errno, fmt::format("cannot read the agent {}", path));
    agent_file f{path, read_whole_file(fd.get(), path), {}, st.st_dev, st.st_ino};
    auto module = symbols::elf_module::open_file(path, target_addr{0});
    auto sym = module ? module->lookup("__tdagent_version") : std::nullopt;
    auto version = sym ? elf_string_at(f.bytes, sym->address.value) : std::nullopt;
    if (!version)
        throw error::target(fmt::format("{} is not libtdagent.so (no __tdagent_version)", path));
    f.version = *version;
    return f;
}

std::optional<std::string> agent_path_in_target(pid_t pid, const agent_file& agent)
{
    std::error_code ec;
    const std::string path = std::filesystem::canonical(agent.path, ec).string();
    if (ec || !loader_path_fits(path))
        return std::nullopt;
    unique_fd root(::open(fmt::format("/proc/{}/root", pid).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root.is_open())
        return std::nullopt;
    // As the target resolves it: "/" is its root, and no symlink is followed
    // (one could lead elsewhere for a tool that reads /proc/PID/root/PATH).
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    unique_fd file(static_cast<int>(::syscall(SYS_openat2, root.get(), path.c_str(), &how, sizeof how)));
    struct stat st {};
    if (!file.is_open() || ::fstat(file.get(), &st) != 0 || st.st_dev != agent.device || st.st_ino != agent.inode)
        return std::nullopt;
    return path;
}

namespace {

/// One load, step by step; every step that fails throws with the reason.
class injection {
public:
    injection(ptrace::traced_process& process, const symbols::module_set& modules, const agent_file& agent,
              const ptrace::other_stop_handler& others, int cancel_fd)
        : process_(process), modules_(modules), agent_(agent), others_(others), cancel_fd_(cancel_fd)
    {
    }

    std::optional<std::string> loaded_version();
    void refuse_unfit_target();
    libc_functions find_libc();
    void wait_until_consistent();
    tid_t choose_thread();
    agent_load_report run(tid_t tid, const libc_functions& libc);

private:
    /// The calls made on the hijacked thread `tid`, which is restored
    /// before this returns: pages, memfd, block and routine, then the
    /// loader thread. Everything undone when one fails.
    void start_loader_thread(tid_t tid, const libc_functions& libc, agent_load_report& report);
    void set_up_page(ptrace::hijacked_thread& h, const libc_functions& libc);
    int create_memfd(ptrace::hijacked_thread& h, const libc_functions& libc);
    void fill_memfd(int target_fd);
    void write_block(const libc_functions& libc, int target_fd);
    void make_routine_executable(ptrace::hijacked_thread& h, const libc_functions& libc);
    /// pthread_create of the loader thread on the routine, then
    /// pthread_detach of it.
    void create_loader_thread(ptrace::hijacked_thread& h, const libc_functions& libc);
    std::uint64_t call(ptrace::hijacked_thread& h, target_addr fn, std::initializer_list<std::uint64_t> args,
                       const char* what);
    void undo_page(ptrace::hijacked_thread& h, const libc_functions& libc, int target_fd);
    void write_bytes(target_addr at, std::span<const std::byte> bytes);
    /// Waits (passing other stops on) until the routine has set `done`;
    /// false at the time limit.
    bool wait_for_loader();
    /// Reads dlopen's outcome, then tells the routine it may end (`traced`
    /// back to 0) and waits for the loader thread to end. The reason when
    /// dlopen failed, else "".
    std::string finish_loader();
    /// The l_name of the link map at `handle` in the target.
    std::string link_map_name(std::uint64_t handle);
    /// After the time limit: the routine is told it is alone, and ends by
    /// itself when dlopen returns.
    [[noreturn]] void leave_loader_alone();
    void forget_page();
    /// The journal entry of the block's `traced` word (8 bytes).
    target_addr flag_entry() const { return block_field(offsetof(loader_block, traced)); }
    /// Where the field at `offset` in the loader block lies in the target.
    target_addr block_field(std::size_t offset) const { return data_ + offset; }
    void pass_time(int ms);
    /// A stop that is not the hijacked thread's return goes to the session;
    /// the hijacked thread's clone names the loader thread.
    void other_stop(const stop_event& ev);

    ptrace::traced_process& process_;
    const symbols::module_set& modules_;
    const agent_file& agent_;
    const ptrace::other_stop_handler& others_;
    int cancel_fd_;
    target_addr page_;   // the routine's page; the block's follows it
    target_addr data_;
    tid_t hijacked_;
    tid_t loader_;   // the thread pthread_create started (from the hijacked thread's clone)
    std::vector<target_addr> journaled_;   // entries in the page, forgotten once it is unmapped
    std::string own_path_;        // agent_path_in_target(), or "" when the target does not see the file
    std::string link_map_name_;   // the agent's name in the link map, read by finish_loader()
};

std::optional<std::string> injection::loaded_version()
{
    for (const auto& m : modules_.modules()) {
        auto sym = m->lookup("__tdagent_version");
        if (!sym)
            continue;
        auto v = read_target_string(process_.memory(), sym->address, 64);
        return v.value_or("(unreadable)");
    }
    return std::nullopt;
}

void injection::refuse_unfit_target()
{
    for (tid_t tid : procfs::list_tasks(process_.pid())) {
        auto text = procfs::read_file(fmt::format("/proc/{}/task/{}/status", process_.pid(), tid.value));
        auto mode = text ? seccomp_mode_of(*text) : std::nullopt;
        if (mode && *mode != 0)
            throw error::target(fmt::format("thread {} runs under a seccomp {} (Seccomp: {} in /proc/{}/task/{}/status): "
                                            "the calls the load needs may be forbidden or kill the process",
                                            tid.value, *mode == 1 ? "strict mode" : "filter", *mode, process_.pid(),
                                            tid.value));
    }
    if (modules_.find(libc_module) != nullptr)
        return;
    for (const auto& m : modules_.modules())
        if (m->soname().find("musl") != std::string::npos || m->path().find("musl") != std::string::npos)
            throw error::target(fmt::format("the target runs on musl libc ({}): the agent needs glibc's dlopen and "
                                            "thread library", m->path()));
    if (modules_.find(loader_module) == nullptr)
        throw error::target("the target is statically linked (no dynamic loader mapped): nothing can load a library "
                            "into it");
    throw error::target("the target has no libc.so.6: the agent needs glibc (2.34 or later)");
}

libc_functions injection::find_libc()
{
    const auto* libc = modules_.find(libc_module);
    auto need = [&](std::string_view name) {
        auto s = libc->lookup(name);
        if (!s)
            throw error::target(fmt::format("{} exports no {}{}", libc->path(), name,
                                            name.starts_with("dlopen") ? " (glibc older than 2.34 keeps it in "
                                                                         "libdl; not supported)"
                                                                       : ""));
        return s->address;
    };
    auto dlopen = libc->lookup("dlopen@GLIBC_2.34");
    libc_functions f;
    f.dlopen = dlopen ? dlopen->address : need("dlopen");
    f.dlerror = need("dlerror");
    f.strdup = need("strdup");
    f.mmap = need("mmap");
    f.mprotect = need("mprotect");
    f.munmap = need("munmap");
    f.memfd_create = need("memfd_create");
    f.close = need("close");
    f.pthread_create = need("pthread_create");
    f.pthread_detach = need("pthread_detach");
    return f;
}

void injection::pass_time(int ms)
{
    double until = seconds_since_start() + ms / 1000.0;
    while (seconds_since_start() < until)
        if (auto ev = process_.next_event(ms))
            others_(*ev);
}

void injection::wait_until_consistent()
{
    const auto* ld = modules_.find(loader_module);
    auto rdebug = ld ? ld->lookup("_r_debug") : std::nullopt;
    if (!rdebug)
        throw error::target(fmt::format("{} exports no _r_debug: cannot tell whether it is loading a library",
                                        loader_module));
    for (int attempt = 0; attempt < consistency_tries; ++attempt) {
        std::int32_t state = -1;
        if (process_.memory().read_value(rdebug->address + offsetof(struct r_debug, r_state), state) &&
            state == r_debug::RT_CONSISTENT)
            return;
        process_.release_all();
        pass_time(consistency_pause_ms);
        process_.stop_all();
    }
    throw error::target(fmt::format("the dynamic loader stayed in the middle of loading or unloading a library "
                                    "(r_debug.r_state not RT_CONSISTENT over {} tries); try again",
                                    consistency_tries));
}

tid_t injection::choose_thread()
{
    // The thread least likely to hold a lock of libc that pthread_create
    // needs (hijack_rank); among equals, the newest (highest TID).
    const auto* libc = modules_.find(libc_module);
    tid_t best{};
    int best_rank = 99;
    for (tid_t tid : process_.tids()) {
        if (process_.tasks().is_unfit_for_call(tid))
            continue;
        auto state = ptrace::thread_state::read(tid);
        if (!state)
            continue;
        const auto& regs = state->general();
        bool in_libc = libc != nullptr && modules_.containing(regs.pc()) == libc;
        int rank = hijack_rank(regs.syscall_number(), regs.arg1(), state->in_restartable_syscall(), in_libc);
        if (rank <= best_rank)
            best = tid, best_rank = rank;
    }
    if (best.value == 0)
        throw error::target("no thread can run code for the load (every one is exiting, in vfork() or in "
                            "group-stop)");
    return best;
}

}  // namespace

namespace {

std::uint64_t injection::call(ptrace::hijacked_thread& h, target_addr fn, std::initializer_list<std::uint64_t> args,
                              const char* what)
{
    std::vector<std::uint64_t> a(args);
    auto rax = h.call(fn, a, call_timeout_ms, [this](const stop_event& ev) { other_stop(ev); });
    if (!rax && !process_.is_alive())
        throw error::target(fmt::format("the process ended during {} on thread {}", what, h.tid().value));
    if (!rax)
        throw error::target(fmt::format("{} on thread {} did not return within {} ms{}", what, h.tid().value,
                                        call_timeout_ms,
                                        h.taken_back() ? " (the thread goes on with it and puts itself back, "
                                                         "registers and signal mask, when it returns)"
                                                       : ""));
    return *rax;
}

void injection::write_bytes(target_addr at, std::span<const std::byte> bytes)
{
    // Not journaled: the two pages are tdctl's own mapping, which nothing
    // but the loader thread ever runs or reads. Put back to zeros by the
    // guardian after a tracer's death, they were pulled from under a loader
    // thread just started, which then faulted on a page of zeros.
    if (!process_.memory().write(at, bytes))
        throw error::target(fmt::format("cannot write the loader page at {:#x}", at.value));
}

void injection::set_up_page(ptrace::hijacked_thread& h, const libc_functions& libc)
{
    std::uint64_t page = call(h, libc.mmap, {0, mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                              ~0ull, 0}, "mmap");
    if (page >= ~std::uint64_t{4095})
        throw error::target(fmt::format("mmap in the target failed: {}", std::strerror(static_cast<int>(-page))));
    page_ = target_addr{page};
    data_ = page_ + page_bytes;
    // memfd_create's name, before the block is written whole.
    const std::string name(loader_memfd_name);
    write_bytes(block_field(offsetof(loader_block, memfd_name)),
                std::as_bytes(std::span(name.c_str(), name.size() + 1)));
}

void injection::fill_memfd(int target_fd)
{
    // The memfd reopened through /proc: the target's mount namespace plays no part.
    std::string path = fmt::format("/proc/{}/fd/{}", process_.pid(), target_fd);
    unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd.is_open())
        throw error::from_errno(errno, fmt::format("opening the target's memfd {}", path));
    std::size_t done = 0;
    while (done < agent_.bytes.size()) {
        ssize_t n = ::write(fd.get(), agent_.bytes.data() + done, agent_.bytes.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            throw error::from_errno(errno, fmt::format("writing the agent into {}", path));
        done += static_cast<std::size_t>(n);
    }
}

void injection::write_block(const libc_functions& libc, int target_fd)
{
    const loader_calls calls{libc.dlopen.value, libc.dlerror.value, libc.close.value, libc.munmap.value,
                             libc.strdup.value};
    const loader_block block = make_loader_block(
        calls, {.memfd = target_fd, .own_path = own_path_, .base = page_.value, .size = mapping_bytes});
    write_bytes(data_, std::as_bytes(std::span(&block, 1)));
    write_bytes(page_, loader_routine_code());
    // The one journaled word: any restore (tdctl killed, a time limit) sets
    // it back to 0, which tells the routine to clean up alone.
    if (!process_.journal().write_value(flag_entry(), std::uint64_t{1}, change_kind::injected))
        throw error::target(fmt::format("cannot write the loader block at {:#x}", data_.value));
    journaled_.push_back(flag_entry());
}

void injection::undo_page(ptrace::hijacked_thread& h, const libc_functions& libc, int target_fd)
{
    if (h.is_stuck()) {
        // Should pthread_create still start the loader thread, the routine
        // must find itself alone (the `traced` flag back to 0): it then
        // unmaps its page itself when dlopen returns.
        if (std::find(journaled_.begin(), journaled_.end(), flag_entry()) != journaled_.end())
            process_.journal().restore(flag_entry());
        log::warning("thread {} is still inside a call made for the agent load{}; its pages are left",
                     h.tid().value,
                     h.taken_back() ? " (it puts itself back when the call returns)" : " and faults when it returns");
        forget_page();
        return;
    }
    try {
        if (target_fd >= 0)
            (void)call(h, libc.close, {static_cast<std::uint64_t>(target_fd)}, "close");
        if (!page_.is_null())
            (void)call(h, libc.munmap, {page_.value, mapping_bytes}, "munmap");
    } catch (const std::exception& e) {
        log::warning("undoing the agent load: {}", e.what());
    }
    forget_page();
}

void injection::forget_page()
{
    for (target_addr a : journaled_)
        process_.journal().forget(a);
    journaled_.clear();
}

void injection::other_stop(const stop_event& ev)
{
    if (ev.kind == stop_kind::thread_created && ev.tid == hijacked_)
        loader_ = ev.child;
    others_(ev);
}

bool injection::wait_for_loader()
{
    const double deadline = seconds_since_start() + dlopen_limit_seconds;
    while (seconds_since_start() < deadline && process_.is_alive()) {
        std::uint64_t done = 0;
        if (process_.memory().read_value(block_field(offsetof(loader_block, done)), done) && done != 0)
            return true;
        if (auto ev = process_.next_event(2))
            others_(*ev);
    }
    return false;
}

std::string injection::finish_loader()
{
    std::uint64_t handle = 0, message = 0;
    process_.memory().read_value(block_field(offsetof(loader_block, handle)), handle);
    process_.memory().read_value(block_field(offsetof(loader_block, error)), message);
    std::string why;
    if (handle == 0)
        why = message ? read_target_string(process_.memory(), target_addr{message}, 512).value_or("?") : "no reason";
    else
        link_map_name_ = link_map_name(handle);
    // Read: the routine may unmap its pages and end (within one 5 ms wait).
    process_.journal().restore(flag_entry());
    forget_page();
    // Wait for it, so that the session starts without it.
    const double deadline = seconds_since_start() + 2.0;
    bool gone = loader_.value == 0;
    while (!gone && seconds_since_start() < deadline && process_.is_alive())
        if (auto ev = process_.next_event(50)) {
            gone = ev->kind == stop_kind::thread_exited && ev->tid == loader_;
            others_(*ev);
        }
    return why;
}

std::string injection::link_map_name(std::uint64_t handle)
{
    std::uint64_t name = 0;
    if (!process_.memory().read_value(target_addr{handle + offsetof(struct link_map, l_name)}, name) || name == 0)
        return "?";
    return read_target_string(process_.memory(), target_addr{name}, 4096).value_or("?");
}

void injection::leave_loader_alone()
{
    process_.journal().restore(flag_entry());
    forget_page();
    process_.stop_all();
    throw error::target(fmt::format("dlopen did not finish within {} s (a constructor or a lock held in the "
                                    "target?); the loader thread goes on alone and cleans up after itself",
                                    dlopen_limit_seconds));
}

agent_load_report injection::run(tid_t tid, const libc_functions& libc)
{
    agent_load_report report;
    const double start = seconds_since_start();
    report.hijacked = tid;
    hijacked_ = tid;
    own_path_ = agent_path_in_target(process_.pid(), agent_).value_or("");
    start_loader_thread(tid, libc, report);
    report.hijack_ms = (seconds_since_start() - start) * 1000;
    const bool done = wait_for_loader();
    report.loader = loader_;
    if (!done)
        leave_loader_alone();
    std::string why = finish_loader();
    process_.stop_all();
    if (!why.empty())
        throw error::target(fmt::format("dlopen of the agent failed in the target: {}", why));
    report.link_map_name = link_map_name_;
    report.total_ms = (seconds_since_start() - start) * 1000;
    return report;
}

void injection::start_loader_thread(tid_t tid, const libc_functions& libc, agent_load_report& report)
{
    // With the way back through rt_sigreturn, a call past its time limit
    // is taken back rather than left to fault when it returns.
    const auto sigreturn = ptrace::find_sigreturn_code(process_.pid(), process_.memory());
    if (!sigreturn)
        log::debug("no rt_sigreturn code found in libc.so.6: remote calls have no way back of their own");
    ptrace::hijacked_thread h(process_, tid, sigreturn.value_or(target_addr{}));
    report.hijacked_in_syscall = h.saved().in_restartable_syscall();
    process_.release_all();   // every other thread runs; the hijacked one stays ours
    int target_fd = -1;
    try {
        set_up_page(h, libc);
        target_fd = create_memfd(h, libc);
        fill_memfd(target_fd);
        write_block(libc, target_fd);
        make_routine_executable(h, libc);
        if (cancelled(cancel_fd_))
            throw error::from_errno(EINTR, "the agent load was interrupted before it started");
        create_loader_thread(h, libc);
    } catch (...) {
        undo_page(h, libc, target_fd);
        h.restore();
        process_.stop_all();
        throw;
    }
    h.restore();
}

int injection::create_memfd(ptrace::hijacked_thread& h, const libc_functions& libc)
{
    auto fd = static_cast<std::int64_t>(
        call(h, libc.memfd_create, {block_field(offsetof(loader_block, memfd_name)).value, MFD_CLOEXEC},
             "memfd_create"));
    if (fd < 0)
        throw error::target(fmt::format("memfd_create in the target failed: {}", std::strerror(-fd)));
    return static_cast<int>(fd);
}

void injection::make_routine_executable(ptrace::hijacked_thread& h, const libc_functions& libc)
{
    auto rc = static_cast<std::int64_t>(call(h, libc.mprotect, {page_.value, page_bytes, PROT_READ | PROT_EXEC},
                                             "mprotect"));
    if (rc != 0)
        throw error::target("no way to run the loader routine: the target may not make a page executable "
                            "(W^X policy)");
}

void injection::create_loader_thread(ptrace::hijacked_thread& h, const libc_functions& libc)
{
    auto rc = static_cast<std::int64_t>(call(
        h, libc.pthread_create, {block_field(offsetof(loader_block, thread)).value, 0, page_.value, data_.value},
        "pthread_create"));
    if (rc != 0)
        throw error::target(fmt::format("pthread_create in the target failed: {}", std::strerror(rc)));
    // Nobody joins the loader thread: detached, its stack and record go
    // when it ends (joinable, they stayed for good: an 8 MiB mapping and a
    // dead thread in every list of the threads).
    std::uint64_t loader = 0;
    if (!process_.memory().read_value(block_field(offsetof(loader_block, thread)), loader) || loader == 0)
        return;
    if (auto d = static_cast<std::int64_t>(call(h, libc.pthread_detach, {loader}, "pthread_detach")); d != 0)
        log::warning("pthread_detach of the loader thread in the target failed: {}", std::strerror(d));
}

}  // namespace

agent_load_report load_agent(ptrace::traced_process& process, const symbols::module_set& modules,
                             const agent_file& agent, const ptrace::other_stop_handler& others, int cancel_fd)
{
    const double start = seconds_since_start();
    struct marker_guard {
        ptrace::traced_process& p;
        ~marker_guard() { p.set_call_marker(target_addr{}); }
    } end_marker{process};
    injection inj(process, modules, agent, others, cancel_fd);
    if (auto present = inj.loaded_version()) {
        if (*present != agent.version)
            throw error::target(fmt::format("an agent of another version is already loaded ('{}'; this tdctl brings "
                                            "'{}'): detach, and restart the program to change it",
                                            *present, agent.version));
        agent_load_report reused;
        reused.reused = true;
        reused.version = *present;
        return reused;
    }
    inj.refuse_unfit_target();
    libc_functions libc = inj.find_libc();
    inj.wait_until_consistent();
    agent_load_report report = inj.run(inj.choose_thread(), libc);
    report.version = agent.version;
    report.total_ms = (seconds_since_start() - start) * 1000;
    return report;
}

}  // namespace tdctl::core
