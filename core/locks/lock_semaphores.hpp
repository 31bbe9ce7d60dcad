// Semaphores used as locks, as the agent records them (agent/
// lock_semaphores.c): a semaphore sem_init() set to 1 while libtdagent.so
// was loaded, with the TID of the thread that took it last and has not
// posted it since. POSIX semaphores have no owner; that TID is the holder
// `deadlock` and `locks` show, marked inferred. CPython's threading.Lock is
// such a semaphore.
#pragma once

#include <cstdint>
#include <optional>

#include <sys/types.h>

#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "core/target_access.hpp"

namespace tdctl::core {

/// Where the agent keeps the table, from libtdagent.so's exported symbols
/// __tdagent_lock_sems (the slots), __tdagent_lock_sems_shape ({slots,
/// probes per lookup, bytes per slot, offset of the holder}) and
/// __tdagent_lock_sems_hash (the multiplier of the slot's hash).
struct lock_semaphore_table {
    target_addr slots;
    std::uint32_t count = 0;          ///< slots, a power of two
    std::uint32_t probes = 0;         ///< slots a lookup probes from the first
    std::uint32_t slot_size = 0;      ///< bytes; the semaphore's address (8 bytes) comes first
    std::uint32_t holder_offset = 0;  ///< of the holder's TID (int32) in a slot
    std::uint64_t hash = 0;
};

/// The table of the agent loaded in `target`; std::nullopt when no agent is
/// loaded, or it keeps no table (an older build), or its shape is not one
/// this reader knows (count not a power of two, slots too small).
std::optional<lock_semaphore_table> find_lock_semaphores(target_access& target);

/// The first slot a lookup of `sem` probes (the agent's hash).
std::uint32_t lock_semaphore_first_slot(const lock_semaphore_table& table, target_addr sem);

/// What the table says of the semaphore at `sem`: std::nullopt when it is
/// not a lock semaphore (not initialised to 1 while the agent was loaded,
/// posted above 1, destroyed) or the table cannot be read; otherwise the
/// TID of its last taker that has not posted it, in the target's PID
/// namespace (0 when nobody holds it).
std::optional<pid_t> lock_semaphore_holder(target_memory& memory, const lock_semaphore_table& table, target_addr sem);

}  // namespace tdctl::core
