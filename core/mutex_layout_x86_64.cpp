#include "core/mutex_layout.hpp"

#include <array>
#include <cstring>

#include <linux/futex.h>

namespace tdctl::core {

namespace {

// glibc's nptl/pthreadP.h: the bits of `__kind` (internal, not installed).
constexpr std::int32_t kind_type_mask = 3;          // PTHREAD_MUTEX_KIND_MASK_NP
constexpr std::int32_t kind_robust = 16;            // PTHREAD_MUTEX_ROBUST_NORMAL_NP
constexpr std::int32_t kind_prio_inherit = 32;      // PTHREAD_MUTEX_PRIO_INHERIT_NP
constexpr std::int32_t kind_prio_protect = 64;      // PTHREAD_MUTEX_PRIO_PROTECT_NP
constexpr std::int32_t kind_pshared = 128;          // PTHREAD_MUTEX_PSHARED_BIT

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

mutex_kind decode_mutex_kind(std::int32_t kind)
{
    mutex_kind k;
    k.base = static_cast<mutex_kind::type>(kind & kind_type_mask);
    k.robust = (kind & kind_robust) != 0;
    k.priority_inherit = (kind & kind_prio_inherit) != 0;
    k.priority_protect = (kind & kind_prio_protect) != 0;
    k.process_shared = (kind & kind_pshared) != 0;
    return k;
}

std::string mutex_kind::name() const
{
    static constexpr std::array<const char*, 4> types = {"normal", "recursive", "errorcheck", "adaptive"};
    std::string text = types[static_cast<std::size_t>(base)];
    if (robust)
        text += "+robust";
    if (priority_inherit)
        text += "+pi";
    if (priority_protect)
        text += "+pp";
    if (process_shared)
        text += "+pshared";
    return text;
}

mutex_owner owner_of(const mutex_fields& fields)
{
    const mutex_kind k = decode_mutex_kind(fields.kind);
    if (k.robust || k.priority_inherit) {
        const auto word = static_cast<std::uint32_t>(fields.lock);
        return {.tid = static_cast<pid_t>(word & FUTEX_TID_MASK),
                .owner_died = (word & FUTEX_OWNER_DIED) != 0,
                .source = "futex word"};
    }
    return {.tid = fields.owner, .owner_died = false, .source = "__owner"};
}

}  // namespace tdctl::core
