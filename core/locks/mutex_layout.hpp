// glibc's pthread_mutex_t seen from outside: its fields read from target
// memory through a layout table (mutex_layout_x86_64.cpp), its kind bits
// decoded, and its owner read where glibc keeps it for that kind.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/target_memory.hpp"
#include "base/types.hpp"

namespace tdctl::core {

/// Byte offsets of the fields of glibc's `struct __pthread_mutex_s` that
/// tdctl reads, and the size read at once.
struct mutex_layout {
    std::size_t lock = 0;     ///< `__lock`, int: the futex word
    std::size_t count = 0;    ///< `__count`, unsigned: recursion depth
    std::size_t owner = 0;    ///< `__owner`, int: owner's TID (non-PI kinds)
    std::size_t nusers = 0;   ///< `__nusers`, unsigned
    std::size_t kind = 0;     ///< `__kind`, int: type and protocol bits
    std::size_t size = 0;     ///< bytes from `__lock` to the end of `__kind`
};

/// The layout of the target's architecture (glibc 2.36 on x86_64).
const mutex_layout& glibc_mutex_layout();

/// The fields of one mutex, as read.
struct mutex_fields {
    std::int32_t lock = 0;
    std::uint32_t count = 0;
    std::int32_t owner = 0;
    std::uint32_t nusers = 0;
    std::int32_t kind = 0;
};

/// Reads the mutex at `address` (the address of `__lock`, which is the
/// futex word a waiter passes to the kernel). std::nullopt when the bytes
/// cannot be read.
std::optional<mutex_fields> read_mutex(target_memory& mem, target_addr address);

/// `__kind` decoded: the type (PTHREAD_MUTEX_NORMAL ... ADAPTIVE) and the
/// protocol and robustness bits of glibc's nptl/pthreadP.h
/// (PTHREAD_MUTEX_KIND_MASK_NP, PTHREAD_MUTEX_ROBUST_NORMAL_NP,
/// PTHREAD_MUTEX_PRIO_INHERIT_NP, PTHREAD_MUTEX_PRIO_PROTECT_NP,
/// PTHREAD_MUTEX_PSHARED_BIT).
struct mutex_kind {
    enum class type { normal, recursive, errorcheck, adaptive };
    type base = type::normal;
    bool robust = false;
    bool priority_inherit = false;
    bool priority_protect = false;
    bool process_shared = false;

    /// "normal", "recursive", "errorcheck", "adaptive", with "+robust",
    /// "+pi", "+pp", "+pshared" as they apply ("errorcheck+robust").
    std::string name() const;
};

mutex_kind decode_mutex_kind(std::int32_t kind);

/// Who owns a mutex, and where that came from.
struct mutex_owner {
    pid_t tid = 0;            ///< in the target's PID namespace; 0: no owner recorded
    /// Robust and PI: FUTEX_OWNER_DIED set in the futex word (the kernel
    /// sets it, and clears the TID bits, when the owner exits holding it).
    bool owner_died = false;
    const char* source = "";  ///< "__owner" or "futex word"
};

/// The owner as glibc records it for this kind: PI and robust mutexes keep
/// the owner's TID in the futex word (bits FUTEX_TID_MASK, with
/// FUTEX_WAITERS and FUTEX_OWNER_DIED beside it: <linux/futex.h>); the other
/// kinds in `__owner`.
mutex_owner owner_of(const mutex_fields& fields);

}  // namespace tdctl::core
