// glibc's pthread_mutex_t on x86_64: where its fields are.
#include "core/locks/mutex_layout.hpp"

#include <array>
#include <cstring>

namespace tdctl::core {

namespace {

std::int32_t int_at(const std::array<std::byte, 20>& raw, std::size_t offset)
{
    std::int32_t v = 0;
    std::memcpy(&v, raw.data() + offset, sizeof v);
    return v;
}

}  // namespace

/// x86_64, from /usr/include/x86_64-linux-gnu/bits/struct_mutex.h (glibc
/// 2.36, `struct __pthread_mutex_s` under `#ifdef __x86_64__`): `__lock` int
/// @0, `__count` unsigned @4, `__owner` int @8, `__nusers` unsigned @12
/// (x86_64 only; 32-bit targets put it after `__kind`), `__kind` int @16.
const mutex_layout& glibc_mutex_layout()
{
    static const mutex_layout layout{.lock = 0, .count = 4, .owner = 8, .nusers = 12, .kind = 16, .size = 20};
    return layout;
}

std::optional<mutex_fields> read_mutex(target_memory& mem, target_addr address)
{
    const mutex_layout& l = glibc_mutex_layout();
    std::array<std::byte, 20> raw{};
    static_assert(sizeof(raw) >= 20);
    if (mem.read(address, std::span<std::byte>(raw.data(), l.size)) != l.size)
        return std::nullopt;
    mutex_fields f;
    f.lock = int_at(raw, l.lock);
    f.count = static_cast<std::uint32_t>(int_at(raw, l.count));
    f.owner = int_at(raw, l.owner);
    f.nusers = static_cast<std::uint32_t>(int_at(raw, l.nusers));
    f.kind = int_at(raw, l.kind);
    return f;
}

}  // namespace tdctl::core
