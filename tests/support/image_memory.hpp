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

    std::size_t read(target_addr a, std::span<std::byte> out) override
    {
        if (!covers(a, out.size()))
            return 0;
        std::memcpy(out.data(), bytes.data() + (a.value - base), out.size());
        return out.size();
    }
    bool write(target_addr a, std::span<const std::byte> in) override
    {
        if (!covers(a, in.size()))
            return false;
        std::memcpy(bytes.data() + (a.value - base), in.data(), in.size());
        return true;
    }
    /// The byte at a target address inside the image.
    std::byte& at(std::uint64_t addr) { return bytes.at(addr - base); }

private:
    bool covers(target_addr a, std::size_t n) const { return a.value >= base && a.value + n <= base + bytes.size(); }
};

}  // namespace tdctl::test
