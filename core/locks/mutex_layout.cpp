// glibc's pthread_mutex_t kind bits and owners, the same on every
// architecture (the layout is in mutex_layout_<arch>.cpp).
#include "core/locks/mutex_layout.hpp"

#include <array>

#include <linux/futex.h>

namespace tdctl::core {

namespace {

// glibc's nptl/pthreadP.h: the bits of `__kind` (internal, not installed).
constexpr std::int32_t kind_type_mask = 3;          // PTHREAD_MUTEX_KIND_MASK_NP
constexpr std::int32_t kind_robust = 16;            // PTHREAD_MUTEX_ROBUST_NORMAL_NP
constexpr std::int32_t kind_prio_inherit = 32;      // PTHREAD_MUTEX_PRIO_INHERIT_NP
constexpr std::int32_t kind_prio_protect = 64;      // PTHREAD_MUTEX_PRIO_PROTECT_NP
constexpr std::int32_t kind_pshared = 128;          // PTHREAD_MUTEX_PSHARED_BIT

}  // namespace

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
