#include "core/protocol/event_rings.hpp"

#include <algorithm>
#include <climits>
#include <atomic>
#include <bit>
#include <cstring>
#include <string>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/protocol/db_descriptor.hpp"

namespace tdctl::core {

namespace {

constexpr std::string_view agent_module = "libtdagent.so";
constexpr std::string_view ring_prefix = "_tdagent_db_ring_";
// The header's magic ("TDRG") and the versions this reader knows: 3, the
// per-thread rings; 4, with the shared ring (a reader that knows only 3
// does not open a region whose shared ring it would never drain).
constexpr std::uint32_t ring_magic = 0x47524454;
constexpr std::uint32_t ring_version_rings = 3;
constexpr std::uint32_t ring_version_shared = 4;
// The anchor's fields (tdagent.h: int32 state, int32 fd, uint64 size).
constexpr std::uint64_t anchor_fd_offset = 4;
constexpr std::uint64_t anchor_size_offset = 8;

std::optional<ring_field> field_of(target_access& target, std::string_view name)
{
    auto f = read_db_field(target, agent_module, ring_prefix, name);
    if (!f || !f->is_valid())
        return std::nullopt;
    return ring_field{f->offset, f->total_bytes()};
}

// A shared word: aligned, 4 or 8 bytes.
bool is_word(const ring_field& f)
{
    return (f.size == 4 || f.size == 8) && f.offset % f.size == 0;
}

template <typename T>
T load(std::byte* base, const ring_field& f, std::memory_order order)
{
    return std::atomic_ref<T>(*reinterpret_cast<T*>(base + f.offset)).load(order);
}

template <typename T>
void store(std::byte* base, const ring_field& f, T value, std::memory_order order)
{
    std::atomic_ref<T>(*reinterpret_cast<T*>(base + f.offset)).store(value, order);
}

// A word of the header or a ring, as unsigned, whatever its size (4 or 8).
std::uint64_t load_word(std::byte* base, const ring_field& f, std::memory_order order)
{
    return f.size == 8 ? load<std::uint64_t>(base, f, order) : load<std::uint32_t>(base, f, order);
}

void store_word(std::byte* base, const ring_field& f, std::uint64_t value)
{
    if (f.size == 8)
        store<std::uint64_t>(base, f, value, std::memory_order_relaxed);
    else
        store<std::uint32_t>(base, f, static_cast<std::uint32_t>(value), std::memory_order_relaxed);
}

std::uint64_t plain_word(const std::byte* base, const ring_field& f)
{
    std::uint64_t v = 0;
    std::memcpy(&v, base + f.offset, std::min<std::uint32_t>(f.size, sizeof v));
    return f.size == 4 ? static_cast<std::uint32_t>(v) : v;
}

}  // namespace

std::span<const ring_layout_field> ring_layout_fields()
{
    using l = ring_layout;
    static constexpr ring_layout_field fields[] = {
        {&l::magic, "region_magic"},          {&l::version, "region_version"},
        {&l::ring_count, "region_ring_count"}, {&l::ring_entries, "region_ring_entries"},
        {&l::ring_offset, "region_ring_offset"}, {&l::ring_stride, "region_ring_stride"},
        {&l::entry_size, "region_entry_size"}, {&l::wake, "region_wake"},
        {&l::heartbeat_ns, "region_heartbeat_ns"}, {&l::no_ring, "region_no_ring"},
        {&l::head, "head"},                   {&l::tail, "tail"},
        {&l::drops, "drops"},                 {&l::owner, "owner"},
        {&l::entries, "entries"},             {&l::time_ns, "entry_time_ns"},
        {&l::subject, "entry_subject"},       {&l::data, "entry_data"},
        {&l::subject_tid, "entry_subject_tid"}, {&l::reporter_tid, "entry_reporter_tid"},
        {&l::event, "entry_event"},           {&l::lock_owner, "entry_lock_owner"},
        {&l::call_site, "entry_call_site"},   {&l::start_routine, "entry_start_routine"},
        {&l::lock_kind, "entry_lock_kind"},
    };
    return fields;
}

std::span<const ring_layout_field> shared_ring_layout_fields()
{
    using l = ring_layout;
    static constexpr ring_layout_field fields[] = {
        {&l::shared_offset, "region_shared_offset"}, {&l::shared_entries, "region_shared_entries"},
        {&l::shared_reserved, "shared_reserved"},   {&l::shared_tail, "shared_tail"},
        {&l::shared_published, "shared_published"}, {&l::shared_slots, "shared_slots"},
    };
    return fields;
}

std::optional<ring_layout> read_ring_layout(target_access& target)
{
    ring_layout l;
    for (const auto& [member, name] : ring_layout_fields()) {
        auto f = field_of(target, name);
        if (!f)
            return std::nullopt;
        l.*member = *f;
    }
    // The shared ring is newer than the rest: an agent without it streams
    // through its per-thread rings alone.
    ring_layout shared = l;
    bool whole = true;
    for (const auto& [member, name] : shared_ring_layout_fields()) {
        auto f = field_of(target, name);
        whole = whole && f.has_value();
        if (f)
            shared.*member = *f;
    }
    // Names and seize requests, newer again: each taken when it is there.
    if (auto name = field_of(target, "entry_name"); name && name->size == 16)
        l.entry_name = shared.entry_name = *name;
    if (auto waiting = field_of(target, "waiting"); waiting && waiting->size == 4 && waiting->offset % 4 == 0)
        l.waiting = shared.waiting = *waiting;
    if (auto waiting = field_of(target, "shared_waiting"); waiting && waiting->size == 4 && waiting->offset % 4 == 0)
        l.shared_waiting = shared.shared_waiting = *waiting;
    if (auto requests = field_of(target, "region_seize_requests"); requests && requests->size == 4 &&
                                                                     requests->offset % 4 == 0)
        l.seize_requests = shared.seize_requests = *requests;
    if (whole && is_word(shared.shared_offset) && is_word(shared.shared_entries) &&
        shared.shared_reserved.size == 8 && shared.shared_tail.size == 8 && shared.shared_reserved.offset % 8 == 0 &&
        shared.shared_tail.offset % 8 == 0 && shared.shared_published.offset % 8 == 0)
        l = shared;
    for (const ring_field* f : {&l.magic, &l.version, &l.ring_count, &l.ring_entries, &l.ring_offset, &l.ring_stride,
                                &l.entry_size, &l.wake, &l.heartbeat_ns, &l.no_ring, &l.head, &l.tail, &l.drops,
                                &l.owner, &l.time_ns, &l.subject, &l.data, &l.subject_tid, &l.reporter_tid, &l.event})
        if (!is_word(*f))
            return std::nullopt;
    return l;
}

std::optional<ring_anchor> read_ring_anchor(target_access& target)
{
    auto anchor = target.lookup_symbol(agent_module, "__tdagent_rings");
    if (!anchor)
        return std::nullopt;
    ring_anchor a;
    if (!target.memory().read_value(anchor->address, a.state) ||
        !target.memory().read_value(anchor->address + static_cast<std::int64_t>(anchor_fd_offset), a.fd) ||
        !target.memory().read_value(anchor->address + static_cast<std::int64_t>(anchor_size_offset), a.size))
        return std::nullopt;
    return a;
}

std::optional<ring_region> ring_region::open(std::span<std::byte> bytes, const ring_layout& l)
{
    auto inside = [&](const ring_field& f) { return std::uint64_t{f.offset} + f.size <= bytes.size(); };
    for (const ring_field* f : {&l.magic, &l.version, &l.ring_count, &l.ring_entries, &l.ring_offset,
                                &l.ring_stride, &l.entry_size, &l.wake, &l.heartbeat_ns, &l.no_ring})
        if (!inside(*f))
            return std::nullopt;
    std::byte* base = bytes.data();
    const std::uint64_t version = plain_word(base, l.version);
    if (load<std::uint32_t>(base, l.magic, std::memory_order_acquire) != ring_magic ||
        (version != ring_version_rings && version != ring_version_shared) ||
        (version == ring_version_shared && !l.has_shared_ring()))
        return std::nullopt;
    ring_region r(bytes, l);
    r.ring_count_ = static_cast<std::uint32_t>(plain_word(base, l.ring_count));
    r.ring_entries_ = static_cast<std::uint32_t>(plain_word(base, l.ring_entries));
    r.ring_offset_ = static_cast<std::uint32_t>(plain_word(base, l.ring_offset));
    r.ring_stride_ = static_cast<std::uint32_t>(plain_word(base, l.ring_stride));
    r.entry_size_ = static_cast<std::uint32_t>(plain_word(base, l.entry_size));
    const std::uint64_t entries_end = std::uint64_t{l.entries.offset} + std::uint64_t{r.ring_entries_} * r.entry_size_;
    const std::uint64_t last_end =
        std::uint64_t{r.ring_offset_} + std::uint64_t{r.ring_stride_} * (r.ring_count_ == 0 ? 0 : r.ring_count_ - 1) +
        entries_end;
    const bool fits = r.ring_count_ > 0 && std::has_single_bit(r.ring_entries_) && r.ring_stride_ >= entries_end &&
                      r.ring_offset_ % 8 == 0 && r.ring_stride_ % 8 == 0 && r.entry_size_ % 8 == 0 &&
                      last_end <= bytes.size();
    for (const ring_field* f : {&l.time_ns, &l.subject, &l.data, &l.subject_tid, &l.reporter_tid, &l.event,
                                &l.lock_owner, &l.call_site, &l.start_routine, &l.lock_kind})
        if (std::uint64_t{f->offset} + f->size > r.entry_size_)
            return std::nullopt;
    if (std::uint64_t{l.entry_name.offset} + l.entry_name.size > r.entry_size_)
        r.l_.entry_name = {};
    if (std::uint64_t{l.seize_requests.offset} + l.seize_requests.size > bytes.size())
        r.l_.seize_requests = {};
    if (std::uint64_t{l.waiting.offset} + l.waiting.size > l.entries.offset)
        r.l_.waiting = {};
    for (const ring_field* f : {&l.head, &l.tail, &l.drops, &l.owner})
        if (std::uint64_t{f->offset} + f->size > l.entries.offset)
            return std::nullopt;
    if (!fits)
        return std::nullopt;
    r.drops_seen_.assign(r.ring_count_, 0);
    if (version == ring_version_shared) {
        if (!inside(l.shared_offset) || !inside(l.shared_entries))
            return std::nullopt;
        const std::uint64_t offset = plain_word(base, l.shared_offset);
        const std::uint64_t n = plain_word(base, l.shared_entries);
        const bool shared_fits = n > 0 && std::has_single_bit(n) && offset % 8 == 0 &&
                                 l.shared_published.offset + 8 * n <= l.shared_slots.offset &&
                                 offset + l.shared_slots.offset + n * r.entry_size_ <= bytes.size() &&
                                 offset + std::max(l.shared_reserved.offset, l.shared_tail.offset) + 8 <= bytes.size();
        if (!shared_fits)
            return std::nullopt;
        r.shared_offset_ = static_cast<std::uint32_t>(offset);
        r.shared_entries_ = static_cast<std::uint32_t>(n);
    }
    return r;
}

ring_event ring_region::entry_at(const std::byte* e) const
{
    ring_event ev;
    ev.time_ns = plain_word(e, l_.time_ns);
    ev.event = static_cast<td_event_e>(plain_word(e, l_.event));
    ev.subject = target_addr{plain_word(e, l_.subject)};
    ev.data = plain_word(e, l_.data);
    ev.subject_tid = static_cast<pid_t>(plain_word(e, l_.subject_tid));
    ev.reporter_tid = static_cast<pid_t>(plain_word(e, l_.reporter_tid));
    ev.lock_owner = static_cast<pid_t>(plain_word(e, l_.lock_owner));
    ev.lock_kind = static_cast<std::uint32_t>(plain_word(e, l_.lock_kind));
    ev.call_site = target_addr{plain_word(e, l_.call_site)};
    ev.start_routine = target_addr{plain_word(e, l_.start_routine)};
    if (l_.entry_name.size == ev.name.size())
        std::memcpy(ev.name.data(), e + l_.entry_name.offset, ev.name.size());
    return ev;
}

void ring_region::drain_shared(std::vector<ring_event>& out, std::uint64_t cut_ns)
{
    if (shared_entries_ == 0)
        return;
    std::erase_if(held_, [&](const ring_event& e) {
        if (e.time_ns >= cut_ns)
            return false;
        out.push_back(e);
        return true;
    });
    std::byte* ring = bytes_.data() + shared_offset_;
    const std::uint64_t reserved = load<std::uint64_t>(ring, l_.shared_reserved, std::memory_order_acquire);
    const std::uint64_t tail = load<std::uint64_t>(ring, l_.shared_tail, std::memory_order_relaxed);
    std::uint64_t new_tail = tail;
    bool gap = false;
    for (std::uint64_t k = tail; k != reserved && k - tail < shared_entries_; ++k) {
        const std::uint64_t slot = k & (shared_entries_ - 1);
        if (taken_beyond_gap_.erase(k) == 0) {
            ring_field published{static_cast<std::uint32_t>(l_.shared_published.offset + 8 * slot), 8};
            if (load<std::uint64_t>(ring, published, std::memory_order_acquire) != k + 1) {
                gap = true;  // taken, not written yet: the tail waits here
                continue;
            }
            ring_event ev = entry_at(ring + l_.shared_slots.offset + slot * entry_size_);
            ev.ring = ring_count_;
            (ev.time_ns < cut_ns ? out : held_).push_back(ev);
        }
        if (gap)
            taken_beyond_gap_.insert(k);
        else
            new_tail = k + 1;
    }
    if (new_tail != tail) {
        store<std::uint64_t>(ring, l_.shared_tail, new_tail, std::memory_order_seq_cst);
        wake_waiters(ring, l_.shared_tail, l_.shared_waiting);
    }
}

void ring_region::wake_waiters(std::byte* base, const ring_field& tail, const ring_field& waiting)
{
    // The tail was stored first (seq_cst): a producer that set its flag
    // after this look sees the new tail before it sleeps.
    if (waiting.size != 4 || tail.size != 8)
        return;
    auto flag = std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(base + waiting.offset));
    if (flag.load(std::memory_order_seq_cst) == 0 || flag.exchange(0, std::memory_order_seq_cst) == 0)
        return;
    // Not FUTEX_PRIVATE_FLAG: the word is in a mapping shared with the target.
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(base + tail.offset), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
              0);
}

std::byte* ring_region::ring_at(std::uint32_t i) const
{
    return bytes_.data() + ring_offset_ + static_cast<std::size_t>(i) * ring_stride_;
}

void ring_region::drain(std::uint32_t i, std::vector<ring_event>& out, std::uint64_t cut_ns)
{
    std::byte* ring = ring_at(i);
    const std::uint64_t head = load_word(ring, l_.head, std::memory_order_acquire);
    const std::uint64_t tail = load_word(ring, l_.tail, std::memory_order_relaxed);
    if (head == tail)
        return;
    // More than a ring's worth would mean a producer that ignores the tail:
    // take what the slots hold now, at most one ring's worth.
    const std::uint64_t first = head - tail > ring_entries_ ? head - ring_entries_ : tail;
    out.reserve(out.size() + (head - first));
    std::uint64_t k = first;
    for (; k != head; ++k) {
        const std::byte* e = ring + l_.entries.offset + (k & (ring_entries_ - 1)) * entry_size_;
        // One producer stamps its entries in order: the rest are later too.
        if (plain_word(e, l_.time_ns) >= cut_ns)
            break;
        ring_event ev = entry_at(e);
        ev.ring = i;
        out.push_back(ev);
    }
    if (k == tail)
        return;
    if (l_.tail.size == 8)
        store<std::uint64_t>(ring, l_.tail, k, std::memory_order_seq_cst);
    else
        store<std::uint32_t>(ring, l_.tail, static_cast<std::uint32_t>(k), std::memory_order_release);
    wake_waiters(ring, l_.tail, l_.waiting);
}

std::vector<ring_event> ring_region::drain_all(std::uint64_t cut_ns)
{
    std::vector<ring_event> out;
    fullest_ = 0;
    for (std::uint32_t i = 0; i < ring_count_; ++i) {
        std::byte* ring = ring_at(i);
        const auto owner = static_cast<std::int32_t>(load_word(ring, l_.owner, std::memory_order_acquire));
        if (owner == 0) {
            drops_seen_[i] = 0;  // a free ring's counter is 0: its next producer counts from there
            continue;
        }
        const std::size_t before = out.size();
        drain(i, out, cut_ns);
        fullest_ = std::max(fullest_, static_cast<std::uint32_t>(out.size() - before));
        // The owner was loaded first: every drop of an ended thread is counted by now.
        const std::uint64_t drops = load_word(ring, l_.drops, std::memory_order_relaxed);
        if (drops > drops_seen_[i]) {
            losses_.push_back(ring_loss{owner < 0 ? -owner : owner, drops - drops_seen_[i]});
            drops_seen_[i] = drops;
        }
        // Its thread ended before this drain began, and everything it wrote
        // is taken: free for another thread, its drop counter back to 0
        // (every drop was taken above; nobody writes the ring meanwhile).
        if (owner < 0 && load_word(ring, l_.head, std::memory_order_acquire) ==
                             load_word(ring, l_.tail, std::memory_order_relaxed)) {
            store_word(ring, l_.drops, 0);
            drops_seen_[i] = 0;
            store<std::int32_t>(ring, l_.owner, 0, std::memory_order_release);
        }
    }
    const std::size_t before = out.size();
    drain_shared(out, cut_ns);
    fullest_ = std::max(fullest_, static_cast<std::uint32_t>(out.size() - before));
    std::ranges::stable_sort(out, {}, &ring_event::time_ns);
    return out;
}

void ring_region::discard()
{
    (void)drain_all();
    (void)take_losses();
    held_.clear();
}

std::uint64_t ring_region::drops() const
{
    std::uint64_t n = 0;
    for (std::uint32_t i = 0; i < ring_count_; ++i)
        n += load_word(ring_at(i), l_.drops, std::memory_order_relaxed);
    return n;
}

std::uint64_t ring_region::no_ring() const
{
    return load_word(bytes_.data(), l_.no_ring, std::memory_order_relaxed);
}

std::uint32_t* ring_region::wake_word() const
{
    if (l_.wake.size != 4 || l_.wake.offset % 4 != 0 || l_.wake.offset + 4 > bytes_.size())
        return nullptr;
    return reinterpret_cast<std::uint32_t*>(bytes_.data() + l_.wake.offset);
}

std::uint32_t ring_region::take_seize_requests()
{
    if (l_.seize_requests.size != 4)
        return 0;
    return std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(bytes_.data() + l_.seize_requests.offset))
        .exchange(0, std::memory_order_acq_rel);
}

void ring_region::beat(std::uint64_t now_ns)
{
    if (l_.heartbeat_ns.size == 8)
        store<std::uint64_t>(bytes_.data(), l_.heartbeat_ns, now_ns, std::memory_order_release);
}

}  // namespace tdctl::core
