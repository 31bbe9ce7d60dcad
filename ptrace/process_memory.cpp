#include "ptrace/process_memory.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"

namespace tdctl::ptrace {

namespace {

// Repeats a positional transfer on /proc/PID/mem (`io` is ::pread or ::pwrite)
// of buf, which starts at target address addr, from byte `done` on, until all
// is done or a call fails with other than EINTR or moves nothing. Returns the
// bytes done in all.
template <typename Byte, typename Io>
std::size_t transfer(int fd, target_addr addr, std::span<Byte> buf, std::size_t done, Io io)
{
    while (done < buf.size()) {
        ssize_t m = io(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(addr.value + done));
        if (m <= 0) {
            if (m < 0 && errno == EINTR)
                continue;
            break;
        }
        done += static_cast<std::size_t>(m);
    }
    return done;
}

}  // namespace

process_memory::process_memory(pid_t pid) : pid_(pid)
{
    reopen();
}

void process_memory::reopen()
{
    std::string path = fmt::format("/proc/{}/mem", pid_);
    unique_fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (!fd.is_open())
        throw error::from_errno(errno, "cannot open " + path);
    mem_fd_ = std::move(fd);
}

std::size_t process_memory::read(target_addr addr, std::span<std::byte> out)
{
    if (out.empty())
        return 0;
    iovec local{out.data(), out.size()};
    iovec remote{reinterpret_cast<void*>(addr.value), out.size()};
    ssize_t n = ::process_vm_readv(pid_, &local, 1, &remote, 1, 0);
    if (n == static_cast<ssize_t>(out.size()))
        return out.size();
    // process_vm_readv stops at the first unreadable page and refuses some
    // mappings (e.g. PROT_NONE guard pages are unreadable either way, but
    // VM_IO ones are not); /proc/PID/mem is the fallback.
    std::size_t done = n > 0 ? static_cast<std::size_t>(n) : 0;
    return transfer(mem_fd_.get(), addr, out, done, ::pread);
}

std::size_t process_memory::read_many(std::span<const std::pair<target_addr, std::span<std::byte>>> ranges)
{
    std::vector<iovec> local, remote;
    local.reserve(ranges.size());
    remote.reserve(ranges.size());
    std::size_t want = 0;
    for (const auto& [addr, buf] : ranges) {
        local.push_back({buf.data(), buf.size()});
        remote.push_back({reinterpret_cast<void*>(addr.value), buf.size()});
        want += buf.size();
    }
    ssize_t n = ::process_vm_readv(pid_, local.data(), local.size(), remote.data(), remote.size(), 0);
    if (n == static_cast<ssize_t>(want))
        return want;
    // Partial: redo range by range so each gets the fallback.
    std::size_t total = 0;
    for (const auto& [addr, buf] : ranges)
        total += read(addr, buf);
    return total;
}

bool process_memory::write_many(std::span<const std::pair<target_addr, std::span<const std::byte>>> ranges)
{
    std::vector<iovec> local, remote;
    local.reserve(ranges.size());
    remote.reserve(ranges.size());
    std::size_t want = 0;
    for (const auto& [addr, bytes] : ranges) {
        local.push_back({const_cast<std::byte*>(bytes.data()), bytes.size()});
        remote.push_back({reinterpret_cast<void*>(addr.value), bytes.size()});
        want += bytes.size();
    }
    ssize_t n = ::process_vm_writev(pid_, local.data(), local.size(), remote.data(), remote.size(), 0);
    if (n == static_cast<ssize_t>(want))
        return true;
    // Short (a read-only page, a range that went away): each range again,
    // through /proc/PID/mem, which also writes read-only mappings.
    bool all = true;
    for (const auto& [addr, bytes] : ranges)
        all = write(addr, bytes) && all;
    return all;
}

bool process_memory::write(target_addr addr, std::span<const std::byte> in)
{
    return transfer(mem_fd_.get(), addr, in, 0, ::pwrite) == in.size();
}

}  // namespace tdctl::ptrace
