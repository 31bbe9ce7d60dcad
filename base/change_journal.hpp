// The one journal of every change tdctl makes to a target's memory:
// breakpoint bytes, the global event mask, per-thread masks and enable
// flags, the loader's initial-report flag, list-head repairs (and later GOT
// entries and injected code). A change is recorded *before* it is written —
// the original bytes first, then what is about to be written — and put back
// in reverse order by detach, by the journal's destructor, or one by one
// (a thread's record when the thread exits).
//
// It is also where the values a restore wants are read: an entry's original
// is the natural value of what it covers, kept for the whole session (an
// entry whose change is over is settled, not dropped: glibc hands a dead
// thread's record to a new thread without resetting its enable flag); and a
// mark keeps the values entries had at one moment (before `arm`), which
// restore_to_mark() puts back.
//
// The entries live in fixed-size slots of a storage block. When the process
// that started tdctl set one up before forking the tracer
// (journal_storage::create_shared), the block is shared with it: if the
// tracer dies without detaching (SIGKILL, OOM, a crash), that process reads
// the block and restores the target through /proc/PID/mem
// (restore_abandoned). Otherwise the block is private to the tracer.
//
// Restoring is careful by construction: an entry is written back only while
// every byte of the target still holds the original, the value written last
// or the value written before it (a write cut short by the tracer's death),
// and only while its guard holds (e.g. a thread record's tid field still
// names the thread whose record was changed); code bytes go back lowest
// address first, one byte at a time, so no thread sees half a patch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <pthread.h>
#include <sys/types.h>

#include "base/target_memory.hpp"
#include "base/types.hpp"

namespace tdctl {

/// What a journaled change is; restore order and policy may depend on it.
enum class change_kind : std::uint8_t {
    code = 1,        ///< breakpoint bytes at an event reporting address
    global_mask,     ///< the thread library's global event mask
    thread_mask,     ///< a thread record's event mask
    thread_enable,   ///< a thread record's report_events flag
    initial_flag,    ///< the loader's flag for threads not yet set up (__nptl_initial_report_events)
    list_head,       ///< a repaired link of the buffered-message list
    got_entry,       ///< a rewritten GOT slot
    injected,        ///< code or data tdctl placed in the target
};

const char* change_kind_name(change_kind k);

/// A condition for restoring: the `length` bytes at `address` must still
/// equal `value` (e.g. a thread record's tid field still holds the thread's
/// TID, so the record was not freed or reused meanwhile).
struct change_guard {
    target_addr address;
    std::uint8_t length = 0;          ///< 1..8 bytes
    std::array<std::byte, 8> value{};

    /// A guard on a trivially copyable value of at most 8 bytes.
    template <typename T>
    static change_guard on(target_addr address, const T& v)
    {
        static_assert(sizeof(T) <= 8);
        change_guard g;
        g.address = address;
        g.length = sizeof(T);
        std::memcpy(g.value.data(), &v, sizeof(T));
        return g;
    }
};

/// One slot of the storage block (plain data: shared between processes).
struct journal_slot {
    std::uint32_t live = 0;           ///< 1 once complete, 0 when free
    change_kind kind{};
    std::uint8_t length = 0;          ///< bytes changed, 1..max_change_bytes
    std::uint8_t guard_length = 0;    ///< 0: no guard
    std::uint8_t flags = 0;           ///< journal_slot::landing_tail, journal_slot::settled
    /// Code whose bytes after the first a trapped thread may be about to run
    /// (a resume-in-place patch's own `ret`): without a tracer to move such a
    /// thread, they go back only once every thread has run on.
    static constexpr std::uint8_t landing_tail = 1;
    /// The change is over (change_journal::settle): the target holds the
    /// original, or another thread's value that is not ours to undo. The
    /// slot stays for its original; every restore passes it by.
    static constexpr std::uint8_t settled = 2;
    std::uint64_t sequence = 0;       ///< order of the first write; restore goes backwards
    std::uint64_t address = 0;
    std::uint64_t guard_address = 0;
    std::array<std::byte, 16> original{};  ///< what the target held before the first write
    std::array<std::byte, 16> written{};   ///< what the last write put there
    std::array<std::byte, 16> previous{};  ///< what the write before the last put there
    std::array<std::byte, 8> guard_value{};
};

/// The block journal slots live in: a header and `capacity` slots.
struct journal_storage {
    static constexpr std::uint64_t magic_value = 0x6c6e72756f6a6474ULL;  // "tdjournl"
    std::uint64_t magic = magic_value;
    std::int32_t pid = 0;                ///< the target; 0 while no journal uses the block
    std::uint32_t capacity = 0;          ///< slots after the header
    std::uint64_t start_time = 0;        ///< the target's start time (process_start_time(), clock ticks)
    std::uint32_t high_water = 0;        ///< slots [0, high_water) may be live
    std::uint32_t claimed = 0;           ///< a change_journal uses the block
    std::uint64_t next_sequence = 1;
    /// Held by the tracer for as long as it lives (a process-shared robust
    /// mutex): the kernel marks it owner-dead and wakes a waiter as the
    /// tracer starts to exit, before the tracer's tracees are let go.
    pthread_mutex_t tracer_alive;
    std::int32_t tracer_tid = 0;         ///< set once the tracer holds tracer_alive

    journal_slot* slots() { return reinterpret_cast<journal_slot*>(this + 1); }
    const journal_slot* slots() const { return reinterpret_cast<const journal_slot*>(this + 1); }

    /// Maps a block shared with processes forked afterwards (MAP_SHARED |
    /// MAP_ANONYMOUS), for `capacity` slots, and makes it the one new journals
    /// use. Throws tdctl::error (os) when the mapping fails.
    static journal_storage& create_shared(std::uint32_t capacity = default_capacity);
    /// The block create_shared() made in this process or an ancestor, or nullptr.
    static journal_storage* shared();

    /// In the tracer, before its first change to a target: takes
    /// tracer_alive for the rest of its life. Throws tdctl::error (os).
    void hold_as_tracer();
    /// In the process that made the block: waits at most timeout_ms for the
    /// tracer that called hold_as_tracer() to die. `dead` when it did (the
    /// kernel wakes this as the tracer's memory is released, which comes
    /// before its tracees are let go), `alive` on timeout, `unusable` when
    /// the mutex cannot be waited on.
    enum class tracer_state { alive, dead, unusable };
    tracer_state wait_for_tracer_death(int timeout_ms);

    /// Slots in a block: 2^17 slots (≈ 11 MiB of address space, touched only
    /// as used) cover a mask and a flag for 64 Ki threads.
    static constexpr std::uint32_t default_capacity = 1u << 17;
    static constexpr std::size_t max_change_bytes = 16;
};

/// What restoring found, for messages: entries written back, entries left
/// because their guard no longer held or the bytes had been changed by
/// someone else (left alone on purpose), and entries that failed to write.
struct restore_tally {
    std::size_t restored = 0;
    std::size_t unchanged = 0;   ///< the target already held the original
    std::size_t left = 0;        ///< guard failed or bytes changed by another writer
    std::size_t failed = 0;      ///< unreadable or unwritable memory
    restore_tally& operator+=(const restore_tally& o);
};

class change_journal {
public:
    /// A journal for the target `pid`, writing through `memory` (which must
    /// outlive it). Claims the shared block when there is one and no other
    /// journal holds it, else uses a private block. Throws tdctl::error (os)
    /// when no block can be mapped.
    change_journal(target_memory& memory, pid_t pid);
    /// Restores every entry still live, newest first; logs what it could not
    /// put back. Never throws.
    ~change_journal() noexcept;
    change_journal(const change_journal&) = delete;
    change_journal& operator=(const change_journal&) = delete;

    /// Journals that `value` is about to be written at `address` (reading the
    /// original bytes the first time the address is seen), then writes it.
    /// False when the original cannot be read or the write fails (the entry
    /// stays, harmless: restore checks the bytes). value.size() is 1..16 and
    /// the same every time for one address; throws std::logic_error otherwise.
    /// `guard`, when given, becomes the entry's guard (a thread record's
    /// write names the thread the record serves now); a settled entry takes
    /// a new change with `guard` or none.
    bool write(target_addr address, std::span<const std::byte> value, change_kind kind,
               std::optional<change_guard> guard = std::nullopt);
    template <typename T>
    bool write_value(target_addr address, const T& value, change_kind kind,
                     std::optional<change_guard> guard = std::nullopt)
    {
        return write(address, std::as_bytes(std::span<const T, 1>(&value, 1)), kind, guard);
    }

    /// Journals like write() but leaves the writing to the caller (code
    /// patched byte by byte in a chosen order, or bytes the target itself
    /// copied). `original` is what the caller read there; used only the
    /// first time the address is seen.
    void note(target_addr address, std::span<const std::byte> original, std::span<const std::byte> value,
              change_kind kind, std::optional<change_guard> guard = std::nullopt, std::uint8_t flags = 0);

    /// Puts one entry back (if its bytes and guard allow) and drops it.
    /// Returns what was done; an address not journaled counts as unchanged.
    restore_tally restore(target_addr address);
    /// Restores every entry of the given kinds, newest first.
    restore_tally restore_kinds(std::initializer_list<change_kind> kinds);
    /// Restores every entry, newest first.
    restore_tally restore_all();

    /// The change at `address` is over (its thread is exiting). With
    /// `put_back`, the original is written back first, if the bytes and the
    /// guard allow (restore()). The entry stays, settled: its original is
    /// still the natural value of what it covers, every restore passes it by,
    /// and the next write starts a new change. Nothing for an address not
    /// journaled or already settled.
    restore_tally settle(target_addr address, bool put_back);
    /// The guard of the active entry at `address` (where it lies, how long,
    /// the value it must hold); std::nullopt when the entry is unknown,
    /// settled or unguarded.
    std::optional<change_guard> guard_of(target_addr address) const;
    /// For a caller that batches its own reads and writes (a report's one
    /// read and one write): the bytes restore() would write back at
    /// `address`, given what the target holds there now (`now`) and at the
    /// entry's guard (`guard_now`, read at guard_of()->address; empty when
    /// unguarded). Empty when restore() would write nothing: the entry is
    /// unknown, settled or code, the guard fails, the bytes are the
    /// original, or someone else wrote them. The caller writes, then
    /// settle(address, false).
    std::vector<std::byte> put_back_bytes(target_addr address, std::span<const std::byte> now,
                                          std::span<const std::byte> guard_now) const;
    /// True when `address` is journaled and its change is not over (not
    /// settled, not restored).
    bool is_active(target_addr address) const;
    /// True when some entry of the given kinds is active.
    bool has_active(std::initializer_list<change_kind> kinds) const;

    /// Sets the mark (replacing an earlier one): from now on, the first
    /// change to each entry keeps its value at the mark — what the target
    /// held just before that change (one read), or the original for an
    /// entry created or settled since. The values stay in this process (the
    /// shared block is not touched).
    void set_mark();
    bool has_mark() const { return marked_; }
    /// Writes back, as journaled writes, the value at the mark of every
    /// active entry of the given kinds changed since the mark and for whose
    /// address `include` holds (e.g. a record still in use), and ends the
    /// mark. Nothing when there is no mark.
    restore_tally restore_to_mark(std::initializer_list<change_kind> kinds,
                                  const std::function<bool(target_addr)>& include);

    /// Drops one entry without writing (the change was undone another way).
    void forget(target_addr address);
    /// Drops every entry without writing: the memory they describe is gone
    /// (the target exec'd or exited).
    void forget_all();

    /// The bytes the target held before tdctl's first write at address (kept
    /// by a settled entry too): the natural value. std::nullopt when the
    /// address is not journaled.
    std::optional<std::vector<std::byte>> original(target_addr address) const;
    bool contains(target_addr address) const { return index_.contains(address); }
    std::size_t size() const { return index_.size(); }
    /// Whether a process that outlives the tracer can restore these entries.
    bool is_shared() const { return shared_; }

    /// For the process that set up the shared block, once the tracer has died:
    /// restores every live entry newest first through `memory` (a fresh
    /// /proc/PID/mem of storage.pid) and frees the block. The caller checks
    /// that storage.pid is still the same process (start_time).
    /// With `first_pass`, a landing_tail entry gets only its first byte back
    /// and stays live (a thread may sit on the rest): call again, without,
    /// once every thread of the target has run on.
    static restore_tally restore_abandoned(journal_storage& storage, target_memory& memory, bool first_pass = false);

private:
    /// What the bytes at an entry hold, against what it records.
    enum class bytes_state { original, ours, not_ours };
    static bytes_state compare_to_ours(const journal_slot& s, std::span<const std::byte> now);
    journal_slot& slot_for(target_addr address, std::size_t length, change_kind kind,
                           const std::optional<change_guard>& guard, std::span<const std::byte> original,
                           std::uint8_t flags);
    void free_slot(std::uint32_t index);
    static restore_tally restore_slot(journal_slot& slot, target_memory& memory, std::size_t length);
    static void set_guard(journal_slot& slot, const std::optional<change_guard>& guard);
    /// The bytes the target holds at the entry's address now (the value
    /// written last when they cannot be read).
    std::array<std::byte, journal_storage::max_change_bytes> bytes_now(target_addr address, const journal_slot& s);

    target_memory& memory_;
    journal_storage* storage_ = nullptr;
    std::vector<std::byte> private_block_;     // used when the shared block is not ours
    bool shared_ = false;
    std::unordered_map<target_addr, std::uint32_t> index_;   // address -> slot
    std::vector<std::uint32_t> free_;                         // freed slots below high_water
    // The mark: for each entry changed since, the bytes it held at the mark.
    bool marked_ = false;
    std::unordered_map<target_addr, std::array<std::byte, journal_storage::max_change_bytes>> at_mark_;
};

/// The target's start time in clock ticks since boot (field 22 of its main
/// thread's /proc/PID/task/PID/stat, the process's), to tell a process from a
/// later one with the same PID; 0 if unreadable.
std::uint64_t process_start_time(pid_t pid);

}  // namespace tdctl
