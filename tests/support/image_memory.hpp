// A flat memory image standing in for a target in unit tests: 1 MiB at
// `base`; reads and writes outside it fail as unmapped memory does.
#pragma once

#include <cstring>
#include <vector>

#include "base/target_memory.hpp"

namespace tdctl::test {

class image_memory final : public target_memory {
public:
    std::vector<std::byte> bytes = std::vector<std::byte>(1 << 20);
    std::uint64_t base = 0x100000;

    /// Calls made, counted as a target's system calls would be: one per
    /// read or write, one per read_many or write_many (one process_vm_readv
    /// or process_vm_writev however many ranges).
    int read_calls = 0;
    int write_calls = 0;

    std::size_t read(target_addr a, std::span<std::byte> out) override
    {
        ++read_calls;
        return copy_out(a, out);
    }
    bool write(target_addr a, std::span<const std::byte> in) override
    {
        ++write_calls;
        return copy_in(a, in);
    }
    std::size_t read_many(std::span<const std::pair<target_addr, std::span<std::byte>>> ranges) override
    {
        ++read_calls;
        std::size_t total = 0;
        for (const auto& [addr, buf] : ranges) {
            std::size_t n = copy_out(addr, buf);
            total += n;
            if (n != buf.size())
                break;  // like process_vm_readv: nothing after a failed range
        }
        return total;
    }
    bool write_many(std::span<const std::pair<target_addr, std::span<const std::byte>>> ranges) override
    {
        ++write_calls;
        bool all = true;
        for (const auto& [addr, in] : ranges)
            all = copy_in(addr, in) && all;
        return all;
    }
    /// The byte at a target address inside the image.
    std::byte& at(std::uint64_t addr) { return bytes.at(addr - base); }

private:
    std::size_t copy_out(target_addr a, std::span<std::byte> out) const
    {
        if (!covers(a, out.size()))
            return 0;
        std::memcpy(out.data(), bytes.data() + (a.value - base), out.size());
        return out.size();
    }
    bool copy_in(target_addr a, std::span<const std::byte> in)
    {
        if (!covers(a, in.size()))
            return false;
        std::memcpy(bytes.data() + (a.value - base), in.data(), in.size());
        return true;
    }
    bool covers(target_addr a, std::size_t n) const { return a.value >= base && a.value + n <= base + bytes.size(); }
};

}  // namespace tdctl::test
