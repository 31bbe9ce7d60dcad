// The narrow way lower layers read and write the target, as proc_service's
// ps_pdread/ps_pdwrite do for glibc's nptl_db. ptrace/ implements it; symbols/
// and core/ only use it.
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include "base/types.hpp"

namespace tdctl {

class target_memory {
public:
    virtual ~target_memory() = default;

    /// Reads up to out.size() bytes at addr. Returns the number of bytes read,
    /// which is short when the range runs into unmapped memory (0 if addr is
    /// unmapped). Throws tdctl::error only when the process is gone.
    virtual std::size_t read(target_addr addr, std::span<std::byte> out) = 0;

    /// Writes all of in at addr, also into read-only mappings such as text
    /// (through /proc/PID/mem). Returns false if any byte could not be written.
    virtual bool write(target_addr addr, std::span<const std::byte> in) = 0;

    /// Reads several ranges (address, destination), with one system call
    /// where the implementation can. Returns the total number of bytes read.
    virtual std::size_t read_many(std::span<const std::pair<target_addr, std::span<std::byte>>> ranges)
    {
        std::size_t total = 0;
        for (const auto& [addr, buf] : ranges)
            total += read(addr, buf);
        return total;
    }

    /// Writes several ranges (address, bytes) in order, with one system call
    /// where the implementation can. False if any byte could not be written
    /// (the ranges before it may have been).
    virtual bool write_many(std::span<const std::pair<target_addr, std::span<const std::byte>>> ranges)
    {
        bool all = true;
        for (const auto& [addr, bytes] : ranges)
            all = write(addr, bytes) && all;
        return all;
    }

    /// Reads exactly sizeof(T) bytes into a trivially copyable T; false when short.
    template <typename T>
    bool read_value(target_addr addr, T& out)
    {
        return read(addr, std::as_writable_bytes(std::span<T, 1>(&out, 1))) == sizeof(T);
    }

    template <typename T>
    bool write_value(target_addr addr, const T& in)
    {
        return write(addr, std::as_bytes(std::span<const T, 1>(&in, 1)));
    }
};

}  // namespace tdctl
