#include "core/protocol/db_descriptor.hpp"

#include <array>
#include <cstring>

#include <fmt/format.h>

namespace tdctl::core {

std::optional<db_field> read_db_field(target_access& target, std::string_view module, std::string_view prefix,
                                      std::string_view name)
{
    auto sym = target.lookup_symbol(module, fmt::format("{}{}", prefix, name));
    if (!sym)
        return std::nullopt;
    std::array<std::uint32_t, 3> words{};
    if (target.memory().read(sym->address, std::as_writable_bytes(std::span(words))) != sizeof words)
        return std::nullopt;
    return db_field{words[0], words[1], words[2]};
}

std::optional<std::uint32_t> read_db_sizeof(target_access& target, std::string_view module, std::string_view prefix,
                                            std::string_view name)
{
    auto sym = target.lookup_symbol(module, fmt::format("{}sizeof_{}", prefix, name));
    if (!sym)
        return std::nullopt;
    std::uint32_t v = 0;
    if (!target.memory().read_value(sym->address, v))
        return std::nullopt;
    return v;
}

std::optional<std::uint64_t> read_uint(target_memory& mem, target_addr addr, std::uint32_t bytes)
{
    if (bytes == 0 || bytes > 8)
        return std::nullopt;
    std::array<std::byte, 8> buf{};
    if (mem.read(addr, std::span(buf.data(), bytes)) != bytes)
        return std::nullopt;
    std::uint64_t v = 0;
    std::memcpy(&v, buf.data(), bytes);  // x86_64 is little-endian
    return v;
}

bool write_uint(target_memory& mem, target_addr addr, std::uint32_t bytes, std::uint64_t value)
{
    if (bytes == 0 || bytes > 8)
        return false;
    std::array<std::byte, 8> buf{};
    std::memcpy(buf.data(), &value, 8);
    return mem.write(addr, std::span<const std::byte>(buf.data(), bytes));
}

}  // namespace tdctl::core
