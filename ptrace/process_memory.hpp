// target_memory over a live process: reads with process_vm_readv (one call
// per request, falling back to /proc/PID/mem for pages the former refuses),
// writes through /proc/PID/mem, which also writes read-only text.
#pragma once

#include <sys/types.h>

#include "base/target_memory.hpp"
#include "base/unique_fd.hpp"

namespace tdctl::ptrace {

class process_memory final : public target_memory {
public:
    /// Opens /proc/PID/mem. Throws tdctl::error (os) if it cannot.
    explicit process_memory(pid_t pid);

    std::size_t read(target_addr addr, std::span<std::byte> out) override;
    bool write(target_addr addr, std::span<const std::byte> in) override;

    /// Reads several ranges with one process_vm_readv; returns total bytes read.
    /// Each range is (address, destination).
    std::size_t read_many(std::span<const std::pair<target_addr, std::span<std::byte>>> ranges) override;
    /// Writes several ranges with one process_vm_writev (writable mappings
    /// only); when that falls short, each range again through /proc/PID/mem.
    bool write_many(std::span<const std::pair<target_addr, std::span<const std::byte>>> ranges) override;

    /// After exec the old /proc/PID/mem refers to the old image: reopen it.
    void reopen();

    pid_t pid() const { return pid_; }

private:
    pid_t pid_;
    unique_fd mem_fd_;
};

}  // namespace tdctl::ptrace
