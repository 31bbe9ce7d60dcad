// What a lock is and who holds it, read while a waiter is stopped at its
// TD_LOCK_TRY or TD_SLEEP report (`locks`). The agent reports only the
// lock's address; its kind comes from the reporter's stack (the agent's
// mutex, rwlock and spin wrappers are frames of their own), and the holder
// from the lock's owner field, whose offset is glibc's x86_64 layout:
//   pthread_mutex_t  __data.__owner       at 8  (bits/struct_mutex.h:
//                    int __lock; unsigned __count; int __owner; ...)
//   pthread_rwlock_t __data.__cur_writer  at 24 (bits/struct_rwlock.h:
//                    six unsigned ints, then int __cur_writer)
// A spin lock is one int (0 free, 1 taken) and names no owner.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "events/event_message.hpp"
#include "events/stack_frame.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::core {

/// Byte offsets of the owner fields (glibc, x86_64 headers named above).
inline constexpr std::uint64_t mutex_owner_offset = 8;
inline constexpr std::uint64_t rwlock_writer_offset = 24;

/// The kind of lock a reporter waits for: the innermost frame whose function
/// names a lock call of the agent or of the thread library ("mutex",
/// "rwlock", "spin" in its name; a name starting "sem_" or "__new_sem_":
/// semaphore, reported as a lock only when the agent knows it as one).
/// unknown when no frame does (no stack).
events::lock_kind lock_kind_of(std::span<const events::stack_frame> frames);

/// The TID (in the target's PID namespace) that owns the lock at `lock` of
/// `kind`, read from its owner field: a mutex's __owner, a write-locked
/// rwlock's __cur_writer. std::nullopt for a spin lock, a semaphore (its
/// holder is the agent's: core/locks/lock_semaphores.hpp), an unknown kind, a
/// field that reads 0 (free, or held by readers only), or unreadable memory.
/// For a PI or robust mutex the same field holds the owner (glibc keeps it
/// there for every kind), with the FUTEX_OWNER_DIED bit cleared by the read.
std::optional<pid_t> lock_owner_of(target_memory& mem, target_addr lock, events::lock_kind kind);

/// Drops from the top of a lock report's stack (innermost first, frame 0 the
/// reporting function) every frame inside the module that holds frame 0 —
/// the reporting thread library, libtdagent.so, however it was loaded
/// (preloaded, dlopen()ed from a memfd) — so the first frame left is the
/// program's call into the lock function. Modules are told apart by the
/// address ranges of `modules` (/proc/PID/maps); a return address is looked
/// up one byte back, inside its call. Frames are left as they are when
/// frame 0 is in no known module.
void drop_reporter_frames(std::vector<events::stack_frame>& frames, const symbols::module_set& modules);

}  // namespace tdctl::core
