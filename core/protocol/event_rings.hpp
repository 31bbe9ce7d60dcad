// The agent's event rings as tdctl reads them (agent/event_rings.c): a
// memfd region the agent maps MAP_SHARED and tdctl maps again, a header and
// per-thread single-producer rings of fixed-size entries. Each thread
// publishes an entry with a release store of its ring's `head`; tdctl loads
// `head` with acquire, copies the entries out and frees their slots with a
// release store of `tail`. No system call per event on either side.
//
// Every offset comes from libtdagent.so's _tdagent_db_ring_* descriptors
// ({bits, count, offset}, the protocol's format: core/protocol/
// db_descriptor.hpp) and the header's own sizes; nothing of the agent's C
// types is compiled in.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/types.h>
#include <thread_db.h>

#include "base/types.hpp"
#include "core/target_access.hpp"

namespace tdctl::core {

/// A field's place in its struct: byte offset and size in bytes.
struct ring_field {
    std::uint32_t offset = 0;
    std::uint32_t size = 0;
};

/// Where each field of the region's header, of a ring and of an entry lies.
struct ring_layout {
    // the header (at the region's start)
    ring_field magic, version, ring_count, ring_entries, ring_offset, ring_stride, entry_size, wake, heartbeat_ns,
        no_ring;
    // a ring (at ring_offset + i * ring_stride)
    ring_field head, tail, drops, owner, entries;
    // an entry (at a ring's entries + k * entry_size)
    ring_field time_ns, subject, data, subject_tid, reporter_tid, event, lock_owner, call_site, start_routine,
        lock_kind;
    // The shared ring (many producers), when the agent has one (all sizes
    // 0 when not: an agent before it): where it is and its slots, in the
    // header; its words; its per-slot published positions (8 bytes each)
    // and its entries.
    ring_field shared_offset, shared_entries, shared_reserved, shared_tail, shared_published, shared_slots;
    bool has_shared_ring() const { return shared_slots.size != 0; }
    // Newer still, each on its own (size 0 when the agent has none): an
    // entry's 16-byte name (the subject's comm at its birth or end), and
    // the header's count of threads asking to be seized before an exec.
    ring_field entry_name, seize_requests;
    // A ring's and the shared ring's `waiting` words (4 bytes): a producer
    // sleeps on the tail's low half for room; the drain that moves the tail
    // wakes it.
    ring_field waiting, shared_waiting;
};

/// Each field of ring_layout and the name of its descriptor (after
/// "_tdagent_db_ring_"), e.g. {&ring_layout::head, "head"}.
struct ring_layout_field {
    ring_field ring_layout::*member;
    std::string_view name;
};
std::span<const ring_layout_field> ring_layout_fields();
/// The shared ring's fields ("region_shared_offset", ...): all or none.
std::span<const ring_layout_field> shared_ring_layout_fields();

/// The layout from the agent's _tdagent_db_ring_* descriptors in `target`;
/// std::nullopt when one is missing (an agent without rings) or has a size
/// this reader does not take (the shared words must be 4 or 8 bytes).
std::optional<ring_layout> read_ring_layout(target_access& target);

/// Where the agent's region is (__tdagent_rings in libtdagent.so, tdagent.h):
/// state 2 once it is made, the memfd's descriptor in the target and the
/// region's size in bytes.
struct ring_anchor {
    std::int32_t state = 0;
    std::int32_t fd = -1;
    std::uint64_t size = 0;
    bool is_ready() const { return state == 2 && fd >= 0 && size != 0; }
};

/// Reads __tdagent_rings; std::nullopt when the agent has none or it cannot be read.
std::optional<ring_anchor> read_ring_anchor(target_access& target);

/// One event as its thread wrote it.
struct ring_event {
    td_event_e event = TD_EVENT_NONE;
    std::uint64_t time_ns = 0;   ///< CLOCK_MONOTONIC in the target when reported
    target_addr subject;         ///< the thread handle the message is about
    std::uint64_t data = 0;      ///< td_event_msg_t.msg.data
    pid_t subject_tid = 0;       ///< in the target's PID namespace; 0 when unknown
    pid_t reporter_tid = 0;      ///< in the target's PID namespace
    /// A lock event: the lock's owner TID (target's PID namespace) when the
    /// wait began, 0 unknown; its kind (1 mutex, 2 rwlock, 3 spin, 4
    /// semaphore; 0 none: agent/event_rings.c).
    pid_t lock_owner = 0;
    std::uint32_t lock_kind = 0;
    /// A wait, a lock event or TD_CREATE: the return address into the
    /// caller of the agent's wrapper (0 otherwise).
    target_addr call_site;
    target_addr start_routine;   ///< TD_CREATE: the new thread's start routine
    /// The subject's comm as the agent wrote it (its birth, its end), when
    /// it did: the thread may be gone before the drain; NUL-padded, all NUL
    /// when none (a fixed array: drains copy and sort many events).
    std::array<char, 16> name{};
    /// name as text (empty when none).
    std::string name_text() const { return std::string(name.data(), strnlen(name.data(), name.size())); }
    std::uint32_t ring = 0;      ///< which ring it came from (ring_count(): the shared ring)
};

/// Events a ring's thread could not write (full ring, drop mode) since the
/// last drain that saw its drop counter.
struct ring_loss {
    pid_t tid = 0;            ///< the producer, in the target's PID namespace
    std::uint64_t count = 0;  ///< events counted instead of written
};

/// A view of the region mapped in tdctl. The target writes it while tdctl
/// reads: every shared word goes through std::atomic_ref, the entries are
/// read only between tail and an acquired head.
class ring_region {
public:
    /// The view over `bytes` (the whole mapping); std::nullopt when the
    /// header's magic or version is not the agent's, or a ring or entry
    /// lies outside `bytes`, or the entries per ring are not a power of two.
    static std::optional<ring_region> open(std::span<std::byte> bytes, const ring_layout& layout);

    std::uint32_t ring_count() const { return ring_count_; }
    std::uint32_t ring_entries() const { return ring_entries_; }
    /// The shared ring's slots; 0 when the agent has none.
    std::uint32_t shared_entries() const { return shared_entries_; }

    /// No cut: drain() and drain_all() take every published entry.
    static constexpr std::uint64_t no_cut = ~std::uint64_t{0};
    /// Appends the entries ring `i` published since the last drain and
    /// stamped before `cut_ns` (CLOCK_MONOTONIC, ns) to `out`, in its order,
    /// then frees their slots; later ones stay for the next drain.
    void drain(std::uint32_t i, std::vector<ring_event>& out, std::uint64_t cut_ns = no_cut);
    /// Appends what the shared ring holds stamped before `cut_ns`, in its
    /// slots' order, to `out`. Its producers do not stamp in slot order:
    /// every published slot is taken, and an entry stamped at or after the
    /// cut is kept here for a later drain; a slot taken but not yet written
    /// holds the tail back, and the slots after it that are published are
    /// taken and remembered.
    void drain_shared(std::vector<ring_event>& out, std::uint64_t cut_ns = no_cut);
    /// Drains every ring up to `cut_ns` (see drain()), the shared ring's too; rings whose thread
    /// ended (owner: minus its TID) and that are now empty are freed for
    /// another thread, after their drops were taken. The events come sorted
    /// by time_ns (each ring's own order kept for equal times); what each
    /// ring's drop counter grew by is kept for take_losses().
    ///
    /// With `cut_ns` read from the clock before the pass, a drain is closed
    /// under causality: an entry published before another entry was
    /// stamped (a thread's TD_CREATE, written by its creator before the new
    /// thread runs, and the new thread's own events) is taken by the same
    /// drain or an earlier one, whatever the rings' order in the pass.
    std::vector<ring_event> drain_all(std::uint64_t cut_ns = no_cut);
    /// The drops found by drain_all() since the last call, one entry per
    /// ring and drain that saw its counter grow.
    std::vector<ring_loss> take_losses() { return std::exchange(losses_, {}); }
    /// Drains every ring and forgets what it held and dropped: what a
    /// session before this one left.
    void discard();
    /// Events counted instead of written (full rings), over every ring.
    std::uint64_t drops() const;
    /// Events that found no free ring.
    std::uint64_t no_ring() const;
    /// Writes tdctl's heartbeat (CLOCK_MONOTONIC, ns).
    void beat(std::uint64_t now_ns);
    /// How many threads asked to be seized before an exec since the last
    /// call (the header's seize_requests, set back to 0); 0 when the agent
    /// has no such word.
    std::uint32_t take_seize_requests();
    /// The most entries the last drain_all() took from one ring.
    std::uint32_t fullest_in_last_drain() const { return fullest_; }
    /// The header's wake word (4 bytes, in this mapping): the agent adds
    /// one and FUTEX_WAKEs it when a ring becomes half full. nullptr when
    /// the layout has no 4-byte wake word.
    std::uint32_t* wake_word() const;

private:
    ring_region(std::span<std::byte> bytes, const ring_layout& layout) : bytes_(bytes), l_(layout) {}
    std::byte* ring_at(std::uint32_t i) const;
    /// After a drain moved the tail at `tail` (in the ring or shared ring
    /// at `base`): wakes the producers asleep on it when `waiting` says one
    /// is (FUTEX_WAKE, shared), and clears the word.
    static void wake_waiters(std::byte* base, const ring_field& tail, const ring_field& waiting);
    /// The entry at `e` (a slot of a ring or of the shared ring).
    ring_event entry_at(const std::byte* e) const;

    std::span<std::byte> bytes_;
    ring_layout l_;
    std::uint32_t ring_count_ = 0;
    std::uint32_t ring_entries_ = 0;
    std::uint32_t ring_offset_ = 0;
    std::uint32_t ring_stride_ = 0;
    std::uint32_t entry_size_ = 0;
    std::uint32_t shared_offset_ = 0;
    std::uint32_t shared_entries_ = 0;
    // The shared ring's entries taken and stamped at or after a drain's cut.
    std::vector<ring_event> held_;
    // Its slots (positions) taken beyond one not yet written.
    std::set<std::uint64_t> taken_beyond_gap_;
    std::vector<std::uint64_t> drops_seen_;  // per ring: its drop counter at the last drain
    std::vector<ring_loss> losses_;
    std::uint32_t fullest_ = 0;
};

}  // namespace tdctl::core
