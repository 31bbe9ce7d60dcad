// core/protocol/event_rings (the reader) against agent/event_rings.c (the
// writer), both linked into this test: the agent makes its memfd region in
// this process, and the reader maps it a second time through
// /proc/self/fd/N, as tdctl maps a target's; the layout comes from the
// agent's own _tdagent_db_ring_* descriptors through read_ring_layout().
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/protocol/event_rings.hpp"
#include "core/session/event_stream.hpp"
#include "core/session/ring_waker.hpp"
#include "ptrace/process_memory.hpp"

extern "C" {
struct tdagent_ring_region;
struct tdagent_ring;
struct tdagent_ring_put_args {
    std::uint64_t subject;
    std::uint64_t data;
    std::int32_t subject_tid;
    std::int32_t reporter_tid;
    std::uint32_t event;
    std::int32_t lock_owner;
    std::uint64_t call_site;
    std::uint64_t start_routine;
    std::uint32_t lock_kind;
    const char* name = nullptr;
};
struct tdagent_ring_region* tdagent_ring_region();
int tdagent_ring_put_waiting(struct tdagent_ring* r, const tdagent_ring_put_args* e);
void tdagent_before_exec();
struct tdagent_ring* tdagent_ring_claim(struct tdagent_ring_region* region, pid_t tid);
void tdagent_ring_release(struct tdagent_ring* r);
int tdagent_ring_put(struct tdagent_ring* r, const tdagent_ring_put_args* e, int count_drop);
int tdagent_ring_put_shared(struct tdagent_ring_region* region, const tdagent_ring_put_args* e);
extern char __tdagent_rings[];
extern unsigned char __tdagent_streaming;
// The agent's check for a controller that is gone (agent/event_report.c,
// not linked here): counted, so the tests see when the rings ask for it.
int controller_checks = 0;
void tdagent_check_controller()
{
    ++controller_checks;
}
// Its tracer checks (agent/event_report.c): a controller is there, and this
// thread is traced unless a test says otherwise.
std::atomic<int> thread_untraced_answer{0};
int tdagent_thread_untraced()
{
    return thread_untraced_answer.load();
}
int tdagent_process_untraced()
{
    return 0;
}
#define TDCTL_RING_DESCRIPTORS(X)                                                                                \
    X(region_magic) X(region_version) X(region_ring_count) X(region_ring_entries) X(region_ring_offset)          \
    X(region_ring_stride) X(region_entry_size) X(region_wake) X(region_heartbeat_ns) X(region_no_ring) X(head)   \
    X(tail) X(drops) X(owner) X(entries) X(entry_time_ns) X(entry_subject) X(entry_data) X(entry_subject_tid)   \
    X(entry_reporter_tid) X(entry_event) X(entry_lock_owner) X(entry_call_site) X(entry_start_routine)           \
    X(entry_lock_kind) X(region_shared_offset) X(region_shared_entries) X(shared_reserved) X(shared_tail)       \
    X(shared_published) X(shared_slots) X(entry_name) X(region_seize_requests) X(waiting) \
    X(shared_waiting)
#define TDCTL_DECLARE(name) extern const std::uint32_t _tdagent_db_ring_##name[3];
TDCTL_RING_DESCRIPTORS(TDCTL_DECLARE)
}

using namespace tdctl;
using namespace std::chrono_literals;

namespace {

// This process as a target: its own memory, and the agent's symbols linked in.
class self_target final : public core::target_access {
public:
    self_target() : memory_(::getpid())
    {
#define TDCTL_ADD(name) symbols_["_tdagent_db_ring_" #name] = reinterpret_cast<std::uint64_t>(&_tdagent_db_ring_##name);
        TDCTL_RING_DESCRIPTORS(TDCTL_ADD)
        symbols_["__tdagent_rings"] = reinterpret_cast<std::uint64_t>(&__tdagent_rings[0]);
    }
    pid_t pid() const override { return ::getpid(); }
    target_memory& memory() override { return memory_; }
    std::optional<symbols::symbol> lookup_symbol(std::string_view module, std::string_view name) override
    {
        auto it = symbols_.find(std::string(name));
        if (module != "libtdagent.so" || it == symbols_.end())
            return std::nullopt;
        return symbols::symbol{it->first, "", target_addr{it->second}, 0, 0, 0};
    }
    bool has_module(std::string_view module) override { return module == "libtdagent.so"; }
    std::vector<tid_t> lwps() override { return {}; }
    std::optional<target_addr> thread_pointer(tid_t) override { return std::nullopt; }

private:
    ptrace::process_memory memory_;
    std::map<std::string, std::uint64_t> symbols_;
};

// The agent's region mapped a second time, as tdctl maps it.
struct second_mapping {
    std::span<std::byte> bytes;
    core::ring_layout layout;

    second_mapping()
    {
        REQUIRE(tdagent_ring_region() != nullptr);
        self_target target;
        auto anchor = core::read_ring_anchor(target);
        REQUIRE(anchor.has_value());
        REQUIRE(anchor->is_ready());
        auto l = core::read_ring_layout(target);
        REQUIRE(l.has_value());
        layout = *l;
        const std::string path = "/proc/self/fd/" + std::to_string(anchor->fd);
        int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        REQUIRE(fd >= 0);
        void* p = ::mmap(nullptr, anchor->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        REQUIRE(p != MAP_FAILED);
        bytes = std::span(static_cast<std::byte*>(p), anchor->size);
    }
    ~second_mapping() { ::munmap(bytes.data(), bytes.size()); }
    second_mapping(const second_mapping&) = delete;
    second_mapping& operator=(const second_mapping&) = delete;

    core::ring_region region()
    {
        auto r = core::ring_region::open(bytes, layout);
        REQUIRE(r.has_value());
        return *r;
    }
};

tdagent_ring_put_args entry(pid_t tid, std::uint64_t data)
{
    return {0x1000u + static_cast<std::uint64_t>(tid), data, tid, tid, TD_LOCK_TRY, tid + 1, 0x2000u + data, 0, 1};
}

std::uint64_t monotonic_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

/// Two rings of the agent's region, claimed for `first` and `second` over a
/// region emptied first; released, and the region drained, at the end.
struct ring_pair {
    core::ring_region& region;
    tdagent_ring* a;
    tdagent_ring* b;
    ring_pair(core::ring_region& r, pid_t first, pid_t second)
        : region((r.drain_all(), r)),
          a(tdagent_ring_claim(tdagent_ring_region(), first)),
          b(tdagent_ring_claim(tdagent_ring_region(), second))
    {
        REQUIRE(a != nullptr);
        REQUIRE(b != nullptr);
    }
    ~ring_pair()
    {
        tdagent_ring_release(a);
        tdagent_ring_release(b);
        region.drain_all();
    }
    ring_pair(const ring_pair&) = delete;
    ring_pair& operator=(const ring_pair&) = delete;
};

/// The shared ring's words in the second mapping, to play a producer that
/// took a slot and has not written it yet.
struct shared_words {
    std::byte* ring;
    const core::ring_layout& l;
    std::uint64_t slots;
    std::uint64_t entry_size;
    explicit shared_words(second_mapping& m)
        : ring(m.bytes.data() + word32(m, m.layout.shared_offset)),
          l(m.layout),
          slots(word32(m, m.layout.shared_entries)),
          entry_size(word32(m, m.layout.entry_size))
    {
    }
    static std::uint32_t word32(second_mapping& m, const core::ring_field& f)
    {
        std::uint32_t v = 0;
        std::memcpy(&v, m.bytes.data() + f.offset, sizeof v);
        return v;
    }
    std::atomic_ref<std::uint64_t> word(std::uint32_t offset) const
    {
        return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(ring + offset));
    }
    /// Takes a slot as a producer does, without writing it: its position.
    std::uint64_t take_slot() const { return word(l.shared_reserved.offset).fetch_add(1); }
    /// Writes the entry of a taken slot and publishes it.
    void publish(std::uint64_t position, std::uint64_t data, std::uint64_t time_ns) const
    {
        std::byte* e = ring + l.shared_slots.offset + (position & (slots - 1)) * entry_size;
        std::memcpy(e + l.time_ns.offset, &time_ns, 8);
        std::memcpy(e + l.data.offset, &data, 8);
        const std::uint32_t event = TD_LOCK_TRY;
        std::memcpy(e + l.event.offset, &event, 4);
        word(static_cast<std::uint32_t>(l.shared_published.offset + 8 * (position & (slots - 1)))).store(position + 1);
    }
    std::uint64_t tail() const { return word(l.shared_tail.offset).load(); }
    std::uint64_t reserved() const { return word(l.shared_reserved.offset).load(); }
};

/// The region emptied, and its shared ring's words.
struct shared_setup {
    second_mapping m;
    core::ring_region region = m.region();
    shared_words w{m};
    shared_setup() { region.drain_all(); }
};

/// One entry of `tid` put in the shared ring, as a thread without a ring does.
void put_shared(pid_t tid, std::uint64_t data)
{
    const auto e = entry(tid, data);
    REQUIRE(tdagent_ring_put_shared(tdagent_ring_region(), &e) == 1);
}

}  // namespace

TEST_CASE("event rings: the shared ring is in the layout, 16384 slots after the per-thread rings")
{
    second_mapping m;
    REQUIRE(m.layout.has_shared_ring());
    auto region = m.region();
    CHECK(region.shared_entries() == 16384);
    CHECK(shared_words(m).slots == 16384);
}

/// Entries each producer of a stress test puts: a tenth under AddressSanitizer,
/// where every put and drain runs several times slower (CI's sanitizer job
/// runs these beside other tests on two CPUs); the checks are the same.
constexpr std::uint64_t stress_entries(std::uint64_t plain)
{
#ifdef __SANITIZE_ADDRESS__
    return plain / 10;
#else
    return plain;
#endif
}

TEST_CASE("event rings: the shared ring with four producers and a consumer draining meanwhile: every entry once, "
          "in each producer's order")
{
    second_mapping m;
    auto region = m.region();
    region.drain_all();
    constexpr std::uint64_t per_thread = stress_entries(100000);
    static_assert(per_thread * 4 > 16384, "the shared ring wraps");
    constexpr int producers = 4;
    std::atomic<int> done{0};
    std::atomic<std::uint64_t> full_retries{0};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p)
        threads.emplace_back([&, p] {
            const pid_t tid = 200000 + p;
            for (std::uint64_t k = 0; k < per_thread; ++k) {
                const auto e = entry(tid, k);
                while (tdagent_ring_put_shared(tdagent_ring_region(), &e) == 0) {
                    full_retries.fetch_add(1, std::memory_order_relaxed);
                    std::this_thread::yield();
                }
            }
            done.fetch_add(1);
        });
    std::map<pid_t, std::uint64_t> next;
    std::uint64_t taken = 0, out_of_order = 0, not_shared = 0;
    for (;;) {
        const bool all_done = done.load() == producers;
        for (const auto& ev : region.drain_all()) {
            if (ev.data != next[ev.reporter_tid]++)
                ++out_of_order;
            if (ev.ring != region.ring_count())
                ++not_shared;
            ++taken;
        }
        if (all_done)
            break;
    }
    for (auto& t : threads)
        t.join();
    taken += region.drain_all().size();  // none left
    MESSAGE(full_retries.load(), " puts found the shared ring full and were made again");
    CHECK(taken == per_thread * producers);
    CHECK(out_of_order == 0);
    CHECK(not_shared == 0);
    for (const auto& [tid, n] : next)
        CHECK(n == per_thread);
    shared_words w(m);
    CHECK(w.tail() == w.reserved());
}

TEST_CASE("event rings: the shared ring's tail waits at a slot taken and not written; what was published after it "
          "is taken once, and the slot when it is written")
{
    shared_setup s;
    auto& region = s.region;
    const auto& w = s.w;
    const std::uint64_t gap = w.take_slot();
    put_shared(7021, 1);
    put_shared(7021, 2);
    auto first = region.drain_all();
    REQUIRE(first.size() == 2);
    CHECK(first[0].data == 1);
    CHECK(first[1].data == 2);
    CHECK(w.tail() == gap);              // held at the slot not written
    CHECK(region.drain_all().empty());  // the two are not taken twice
    w.publish(gap, 0, monotonic_ns());
    auto second = region.drain_all();
    REQUIRE(second.size() == 1);
    CHECK(second[0].data == 0);
    CHECK(w.tail() == gap + 3);
    CHECK(w.tail() == w.reserved());
}

TEST_CASE("event rings: the shared ring's entries are not in time order: one stamped after the cut is kept for a "
          "later drain, one after it stamped before the cut is taken")
{
    shared_setup s;
    auto& region = s.region;
    const auto& w = s.w;
    // A producer preempted between its slot and its clock reading: its
    // entry comes first in the ring and last in time.
    const std::uint64_t late = w.take_slot();
    put_shared(7031, 1);
    std::this_thread::sleep_for(1ms);
    const std::uint64_t cut = monotonic_ns();
    std::this_thread::sleep_for(1ms);
    w.publish(late, 0, monotonic_ns());
    auto before = region.drain_all(cut);
    REQUIRE(before.size() == 1);
    CHECK(before[0].data == 1);
    CHECK(w.tail() == late + 2);  // both slots consumed: the late entry waits in tdctl
    CHECK(region.drain_all(cut).empty());
    auto after = region.drain_all(monotonic_ns());
    REQUIRE(after.size() == 1);
    CHECK(after[0].data == 0);
}

TEST_CASE("event rings: four producers and a consumer draining meanwhile: every entry once, in each thread's order")
{
    second_mapping m;
    auto region = m.region();
    constexpr std::uint64_t per_thread = stress_entries(200000);
    constexpr int producers = 4;
    REQUIRE(per_thread > 4 * region.ring_entries());  // each ring wraps
    std::atomic<int> done{0};
    std::vector<std::thread> threads;
    std::atomic<std::uint64_t> full_retries{0};
    const std::uint64_t before = monotonic_ns();
    std::array<tdagent_ring*, producers> rings{};
    for (int p = 0; p < producers; ++p) {
        rings[p] = tdagent_ring_claim(tdagent_ring_region(), 100000 + p);  // a made-up TID: the ring's owner
        REQUIRE(rings[p] != nullptr);
    }
    for (int p = 0; p < producers; ++p)
        threads.emplace_back([&, p] {
            const pid_t tid = 100000 + p;
            tdagent_ring* r = rings[p];
            for (std::uint64_t k = 0; k < per_thread; ++k) {
                const auto e = entry(tid, k);
                while (tdagent_ring_put(r, &e, 0) == 0) {  // full: lossless, so again
                    full_retries.fetch_add(1, std::memory_order_relaxed);
                    std::this_thread::yield();
                }
            }
            tdagent_ring_release(r);
            done.fetch_add(1);
        });
    std::map<pid_t, std::uint64_t> next;   // TID -> the data expected next
    std::uint64_t taken = 0, out_of_order = 0, last_time = 0, unsorted = 0, too_early = 0;
    while (taken < per_thread * producers) {
        const bool all_done = done.load() == producers;
        for (const auto& ev : region.drain_all()) {
            if (ev.data != next[ev.reporter_tid]++)
                ++out_of_order;
            if (ev.time_ns < last_time)
                ++unsorted;
            last_time = ev.time_ns;
            if (ev.time_ns < before)
                ++too_early;
            ++taken;
        }
        if (all_done && taken < per_thread * producers)
            break;  // nothing more can come
        last_time = 0;  // the order is per drain
    }
    for (auto& t : threads)
        t.join();
    for (const auto& ev : region.drain_all())  // none left
        (void)ev, ++taken;
    MESSAGE(full_retries.load(), " puts found their ring full and were made again");
    CHECK(taken == per_thread * producers);
    CHECK(out_of_order == 0);
    CHECK(unsorted == 0);
    CHECK(too_early == 0);  // stamped with CLOCK_MONOTONIC, after the test began
    CHECK(next.size() == producers);
    for (const auto& [tid, n] : next)
        CHECK(n == per_thread);
    CHECK(region.drops() == 0);
}

TEST_CASE("event rings: a full ring refuses a put (counted as a drop when asked) and overwrites nothing")
{
    second_mapping m;
    auto region = m.region();
    region.drain_all();  // free what earlier cases left
    tdagent_ring* r = tdagent_ring_claim(tdagent_ring_region(), 4242);
    REQUIRE(r != nullptr);
    const std::uint64_t drops_before = region.drops();
    for (std::uint64_t k = 0; k < region.ring_entries(); ++k) {
        const auto e = entry(4242, k);
        REQUIRE(tdagent_ring_put(r, &e, 1) == 1);
    }
    const auto extra = entry(4242, 999999);
    for (int i = 0; i < 5; ++i)
        CHECK(tdagent_ring_put(r, &extra, 1) == 0);
    CHECK(tdagent_ring_put(r, &extra, 0) == 0);  // not counted
    CHECK(region.drops() - drops_before == 5);
    auto events = region.drain_all();
    REQUIRE(events.size() == region.ring_entries());
    for (std::uint64_t k = 0; k < events.size(); ++k)
        CHECK(events[k].data == k);
    CHECK(events.front().event == TD_LOCK_TRY);
    CHECK(events.front().subject == target_addr{0x1000u + 4242});
    CHECK(events.front().subject_tid == 4242);
    // Drained: room again. Released and drained: the ring is free for another thread.
    CHECK(tdagent_ring_put(r, &extra, 1) == 1);
    tdagent_ring_release(r);
    CHECK(region.drain_all().size() == 1);
    tdagent_ring* again = tdagent_ring_claim(tdagent_ring_region(), 4343);
    CHECK(again == r);  // the first free ring
    tdagent_ring_release(again);
    region.drain_all();
}

TEST_CASE("event rings: drops are taken per thread, an ended thread's too, and discard forgets them")
{
    second_mapping m;
    auto region = m.region();
    region.discard();  // what earlier cases left
    CHECK(region.take_losses().empty());
    tdagent_ring* a = tdagent_ring_claim(tdagent_ring_region(), 8001);
    tdagent_ring* b = tdagent_ring_claim(tdagent_ring_region(), 8002);
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    auto fill_and_drop = [&](tdagent_ring* r, pid_t tid, int drops) {
        for (std::uint64_t k = 0; k < region.ring_entries(); ++k) {
            const auto e = entry(tid, k);
            REQUIRE(tdagent_ring_put(r, &e, 1) == 1);
        }
        const auto extra = entry(tid, 0);
        for (int i = 0; i < drops; ++i)
            REQUIRE(tdagent_ring_put(r, &extra, 1) == 0);
    };
    fill_and_drop(a, 8001, 3);
    fill_and_drop(b, 8002, 7);
    CHECK(region.drain_all().size() == 2 * region.ring_entries());
    auto losses = region.take_losses();
    std::ranges::sort(losses, {}, &core::ring_loss::tid);
    REQUIRE(losses.size() == 2);
    CHECK(losses[0].tid == 8001);
    CHECK(losses[0].count == 3);
    CHECK(losses[1].tid == 8002);
    CHECK(losses[1].count == 7);
    CHECK(region.take_losses().empty());  // taken once
    // b drops more and ends before the next drain: its TID is still known,
    // and its ring is freed once drained.
    fill_and_drop(b, 8002, 2);
    tdagent_ring_release(b);
    region.drain_all();
    losses = region.take_losses();
    REQUIRE(losses.size() == 1);
    CHECK(losses[0].tid == 8002);
    CHECK(losses[0].count == 2);
    tdagent_ring* again = tdagent_ring_claim(tdagent_ring_region(), 8003);
    CHECK(again == b);  // freed: its counter stays, only growth is a loss
    region.drain_all();
    CHECK(region.take_losses().empty());
    // Drops a view never drained (a session before this one) are forgotten.
    fill_and_drop(a, 8001, 4);
    auto later = m.region();
    later.discard();
    CHECK(later.take_losses().empty());
    fill_and_drop(a, 8001, 1);
    later.drain_all();
    losses = later.take_losses();
    REQUIRE(losses.size() == 1);
    CHECK(losses[0].count == 1);
    tdagent_ring_release(a);
    tdagent_ring_release(again);
    later.drain_all();
}

TEST_CASE("event rings: drain_all merges the rings by the target's clock")
{
    second_mapping m;
    auto region = m.region();
    ring_pair rings(region, 7001, 7002);
    for (std::uint64_t k = 0; k < 10; ++k) {
        const auto e = entry(k % 2 == 0 ? 7001 : 7002, k);
        REQUIRE(tdagent_ring_put(k % 2 == 0 ? rings.a : rings.b, &e, 0) == 1);
    }
    auto events = region.drain_all();
    REQUIRE(events.size() == 10);
    for (std::uint64_t k = 0; k < 10; ++k)
        CHECK(events[k].data == k);
}

// A thread's TD_DEATH (its own ring) was drained before its TD_CREATE
// (its creator's ring, passed over just before the creator wrote it): the
// watch printed the death first (1 or 2 of 3 `watch all` runs of churn 8 100).
TEST_CASE("event rings: a drain cut at a time takes what was stamped before it and leaves the rest for the next")
{
    second_mapping m;
    auto region = m.region();
    ring_pair rings(region, 7011, 7012);
    tdagent_ring* a = rings.a;
    tdagent_ring* b = rings.b;
    auto put = [](tdagent_ring* r, pid_t tid, std::uint64_t data) {
        const auto e = entry(tid, data);
        REQUIRE(tdagent_ring_put(r, &e, 0) == 1);
    };
    put(a, 7011, 0);
    put(b, 7012, 1);
    std::this_thread::sleep_for(1ms);
    const std::uint64_t cut = monotonic_ns();
    std::this_thread::sleep_for(1ms);
    put(a, 7011, 2);
    put(b, 7012, 3);
    auto before = region.drain_all(cut);
    REQUIRE(before.size() == 2);
    CHECK(before[0].data == 0);
    CHECK(before[1].data == 1);
    for (const auto& e : before)
        CHECK(e.time_ns < cut);
    // What the cut left is the next drain's, in order.
    auto after = region.drain_all(cut);
    CHECK(after.empty());
    after = region.drain_all(monotonic_ns());
    REQUIRE(after.size() == 2);
    CHECK(after[0].data == 2);
    CHECK(after[1].data == 3);
}

TEST_CASE("event rings: a region whose header is not the agent's is not opened")
{
    second_mapping m;
    std::vector<std::byte> zeros(m.bytes.size());
    CHECK_FALSE(core::ring_region::open(zeros, m.layout).has_value());
    CHECK_FALSE(core::ring_region::open(m.bytes.first(64), m.layout).has_value());  // rings outside
    CHECK(core::ring_region::open(m.bytes, m.layout).has_value());
}

TEST_CASE("event rings: a version 3 region (an agent before the shared ring) opens without one; a version 4 region "
          "needs the shared ring's descriptors")
{
    second_mapping m;
    std::vector<std::byte> copy(m.bytes.begin(), m.bytes.end());
    core::ring_layout without = m.layout;
    for (const auto& [member, name] : core::shared_ring_layout_fields())
        without.*member = core::ring_field{};
    CHECK_FALSE(core::ring_region::open(copy, without).has_value());  // version 4, no descriptors
    const std::uint32_t v3 = 3;
    std::memcpy(copy.data() + m.layout.version.offset, &v3, sizeof v3);
    auto old = core::ring_region::open(copy, without);
    REQUIRE(old.has_value());
    CHECK(old->shared_entries() == 0);
    CHECK(old->drain_all().empty());
}

TEST_CASE("event rings: a heartbeat older than a second turns streaming off in the agent, at a put or a full ring, "
          "and asks whether the controller is gone")
{
    second_mapping m;
    auto region = m.region();
    region.drain_all();
    tdagent_ring* r = tdagent_ring_claim(tdagent_ring_region(), 5151);
    REQUIRE(r != nullptr);
    auto put = [&](std::uint64_t n) {
        std::uint64_t written = 0;
        for (std::uint64_t k = 0; k < n; ++k) {
            const auto e = entry(5151, k);
            written += static_cast<std::uint64_t>(tdagent_ring_put(r, &e, 0));
        }
        return written;
    };
    controller_checks = 0;
    // A fresh beat: puts do not touch the flag.
    __atomic_store_n(&__tdagent_streaming, 1, __ATOMIC_RELEASE);
    region.beat(monotonic_ns());
    CHECK(put(600) == 600);
    CHECK(__atomic_load_n(&__tdagent_streaming, __ATOMIC_ACQUIRE) == 1);
    CHECK(controller_checks == 0);
    // Two seconds old: within the next 256 puts the agent turns it off,
    // and asks once whether the controller is gone.
    region.beat(monotonic_ns() - 2000000000u);
    CHECK(put(256) == 256);
    CHECK(__atomic_load_n(&__tdagent_streaming, __ATOMIC_ACQUIRE) == 0);
    CHECK(controller_checks == 1);
    // A full ring looks at it at once (nothing drains a dead controller's
    // rings); once off, the flag is not turned off, nor asked about, again.
    __atomic_store_n(&__tdagent_streaming, 1, __ATOMIC_RELEASE);
    CHECK(put(region.ring_entries()) == region.ring_entries() - 856);
    CHECK(__atomic_load_n(&__tdagent_streaming, __ATOMIC_ACQUIRE) == 0);
    CHECK(controller_checks == 2);
    CHECK(put(10) == 0);
    CHECK(controller_checks == 2);
    __atomic_store_n(&__tdagent_streaming, 0, __ATOMIC_RELEASE);
    tdagent_ring_release(r);
    region.drain_all();
}

TEST_CASE("event rings: the put that fills a ring to half bumps the wake word, and a ring_waker on tdctl's mapping "
          "is woken by it")
{
    second_mapping m;
    auto region = m.region();
    region.discard();  // what earlier cases left
    std::uint32_t* word = region.wake_word();
    REQUIRE(word != nullptr);
    auto load = [word] { return std::atomic_ref<std::uint32_t>(*word).load(); };
    std::atomic<int> wakes{0};
    core::ring_waker waker(word, [&wakes] { wakes.fetch_add(1); });
    tdagent_ring* r = tdagent_ring_claim(tdagent_ring_region(), 5151);
    REQUIRE(r != nullptr);
    const std::uint32_t half = region.ring_entries() / 2;
    const std::uint32_t before = load();
    for (std::uint32_t k = 0; k + 1 < half; ++k) {
        const auto e = entry(5151, k);
        REQUIRE(tdagent_ring_put(r, &e, 1) == 1);
    }
    CHECK(load() == before);  // below half: no wake, no system call
    const auto e = entry(5151, half);
    REQUIRE(tdagent_ring_put(r, &e, 1) == 1);
    CHECK(load() == before + 1);
    // The waker's thread runs the callback (bounded: 5 s).
    for (int i = 0; i < 5000 && wakes.load() == 0; ++i)
        ::usleep(1000);
    CHECK(wakes.load() == 1);
    // Past half, and a drain: no second wake until the ring fills to half again.
    for (std::uint32_t k = half; k < half + 10; ++k) {
        const auto more = entry(5151, k);
        REQUIRE(tdagent_ring_put(r, &more, 1) == 1);
    }
    CHECK(load() == before + 1);
    CHECK(region.drain_all().size() == half + 10);
    CHECK(region.fullest_in_last_drain() == half + 10);
    tdagent_ring_release(r);
    region.drain_all();
}

TEST_CASE("drain interval: halved at half full down to 2 ms, doubled below a quarter up to 50 ms, kept between")
{
    using core::event_stream;
    int ms = event_stream::min_drain_interval_ms;
    // An idle stream (nothing drained, or no region yet: 0) backs off to the most.
    for (int i = 0; i < 10; ++i)
        ms = event_stream::next_drain_interval_ms(ms, 0.0);
    CHECK(ms == event_stream::max_drain_interval_ms);
    CHECK(event_stream::next_drain_interval_ms(ms, 0.25) == ms);
    CHECK(event_stream::next_drain_interval_ms(ms, 0.49) == ms);
    CHECK(event_stream::next_drain_interval_ms(ms, 0.5) == ms / 2);
    for (int i = 0; i < 10; ++i)
        ms = event_stream::next_drain_interval_ms(ms, 1.0);
    CHECK(ms == event_stream::min_drain_interval_ms);
    CHECK(event_stream::next_drain_interval_ms(8, 1.0 / 32) == 16);
    // A steady 100,000 events a second into a 1,024-entry ring: 2 ms drains
    // find a fifth of it, so the interval grows to 4 ms and stays.
    CHECK(event_stream::next_drain_interval_ms(2, 0.2) == 4);
    CHECK(event_stream::next_drain_interval_ms(4, 0.4) == 4);
}

namespace {

/// A put as the agent's reporting path makes it in a waiting stream: 1
/// when written, 0 when it gave up.
int put_waiting(tdagent_ring* r, const tdagent_ring_put_args& e)
{
    return tdagent_ring_put_waiting(r, &e);
}

/// Fills ring `r` of `tid` to the brim.
void fill(tdagent_ring* r, pid_t tid, std::uint32_t entries)
{
    for (std::uint64_t k = 0; k < entries; ++k) {
        const auto e = entry(tid, k);
        REQUIRE(tdagent_ring_put(r, &e, 0) == 1);
    }
}

}  // namespace

TEST_CASE("event rings: in a waiting stream a full ring's put waits until the consumer drains, and gives up only "
          "when streaming goes off")
{
    second_mapping m;
    auto region = m.region();
    region.drain_all();
    region.beat(monotonic_ns());
    tdagent_ring* r = tdagent_ring_claim(tdagent_ring_region(), 6161);
    REQUIRE(r != nullptr);
    __atomic_store_n(&__tdagent_streaming, 1 | 4, __ATOMIC_RELEASE);

    fill(r, 6161, region.ring_entries());
    std::atomic<int> result{-1};
    std::thread producer([&] { result = put_waiting(r, entry(6161, 777777)); });
    // Waiting, asleep on the tail with its flag up, not written, not
    // dropped: the consumer has not drained.
    REQUIRE(m.layout.waiting.size == 4);
    auto waiting = std::atomic_ref<std::uint32_t>(
        *reinterpret_cast<std::uint32_t*>(reinterpret_cast<std::byte*>(r) + m.layout.waiting.offset));
    for (int i = 0; i < 2000 && waiting.load() == 0; ++i)
        std::this_thread::sleep_for(1ms);
    CHECK(waiting.load() == 1);
    CHECK(result.load() == -1);
    auto first = region.drain_all();
    CHECK(waiting.load() == 0);  // the drain took the flag down as it woke the producer
    producer.join();
    CHECK(result.load() == 1);
    CHECK(first.size() == region.ring_entries());
    auto second = region.drain_all();
    REQUIRE(second.size() == 1);
    CHECK(second[0].data == 777777);
    CHECK(region.drops() == 0);

    // Full again; the stream ends while the put waits: it gives up.
    fill(r, 6161, region.ring_entries());
    result = -1;
    std::thread quitter([&] { result = put_waiting(r, entry(6161, 888888)); });
    std::this_thread::sleep_for(30ms);
    CHECK(result.load() == -1);
    __atomic_store_n(&__tdagent_streaming, 0, __ATOMIC_RELEASE);
    quitter.join();
    CHECK(result.load() == 0);
    // Without the waiting bit a full ring is refused at once.
    __atomic_store_n(&__tdagent_streaming, 1, __ATOMIC_RELEASE);
    CHECK(put_waiting(r, entry(6161, 999999)) == 0);
    __atomic_store_n(&__tdagent_streaming, 0, __ATOMIC_RELEASE);
    tdagent_ring_release(r);
    region.drain_all();
}

TEST_CASE("event rings: in a waiting stream a stale heartbeat asks whether the controller is gone and leaves "
          "streaming on (threads born untraced cannot stop)")
{
    second_mapping m;
    auto region = m.region();
    region.drain_all();
    tdagent_ring* r = tdagent_ring_claim(tdagent_ring_region(), 6262);
    REQUIRE(r != nullptr);
    controller_checks = 0;
    __atomic_store_n(&__tdagent_streaming, 1 | 4, __ATOMIC_RELEASE);
    region.beat(monotonic_ns() - 2000000000u);
    for (std::uint64_t k = 0; k < 256; ++k) {
        const auto e = entry(6262, k);
        REQUIRE(tdagent_ring_put(r, &e, 0) == 1);
    }
    CHECK(__atomic_load_n(&__tdagent_streaming, __ATOMIC_ACQUIRE) == (1 | 4));
    CHECK(controller_checks >= 1);
    __atomic_store_n(&__tdagent_streaming, 0, __ATOMIC_RELEASE);
    tdagent_ring_release(r);
    region.drain_all();
}

TEST_CASE("event rings: an entry's name reaches the drain; an entry without one drains with none")
{
    second_mapping m;
    REQUIRE(m.layout.entry_name.size == 16);
    auto region = m.region();
    region.drain_all();
    tdagent_ring* r = tdagent_ring_claim(tdagent_ring_region(), 6363);
    REQUIRE(r != nullptr);
    const char name[16] = "worker-7";
    auto named = entry(6363, 1);
    named.name = name;
    const char full[16] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p'};
    auto unterminated = entry(6363, 2);
    unterminated.name = full;
    const auto plain = entry(6363, 3);
    REQUIRE(tdagent_ring_put(r, &named, 0) == 1);
    REQUIRE(tdagent_ring_put(r, &unterminated, 0) == 1);
    REQUIRE(tdagent_ring_put(r, &plain, 0) == 1);
    auto events = region.drain_all();
    REQUIRE(events.size() == 3);
    CHECK(events[0].name_text() == "worker-7");
    CHECK(events[1].name_text() == "abcdefghijklmnop");
    CHECK(events[2].name_text().empty());
    tdagent_ring_release(r);
    region.drain_all();
}

TEST_CASE("event rings: an untraced thread about to exec in a waiting stream asks to be seized and waits until it "
          "is traced; a traced one, or no waiting stream, goes on at once")
{
    second_mapping m;
    REQUIRE(m.layout.seize_requests.size == 4);
    auto region = m.region();
    region.beat(monotonic_ns());
    CHECK(region.take_seize_requests() == 0);

    __atomic_store_n(&__tdagent_streaming, 1, __ATOMIC_RELEASE);
    thread_untraced_answer = 1;
    tdagent_before_exec();  // no waiting stream: nothing asked
    CHECK(region.take_seize_requests() == 0);

    __atomic_store_n(&__tdagent_streaming, 1 | 4, __ATOMIC_RELEASE);
    std::atomic<bool> done{false};
    std::thread execer([&] {
        tdagent_before_exec();
        done = true;
    });
    // It asks, then waits: "seized" 40 ms later, it goes on.
    std::uint32_t asked = 0;
    for (int i = 0; i < 200 && asked == 0; ++i) {
        std::this_thread::sleep_for(1ms);
        asked = region.take_seize_requests();
    }
    CHECK(asked == 1);
    std::this_thread::sleep_for(40ms);
    CHECK_FALSE(done.load());
    thread_untraced_answer = 0;
    execer.join();
    CHECK(done.load());

    tdagent_before_exec();  // traced: nothing asked
    CHECK(region.take_seize_requests() == 0);
    __atomic_store_n(&__tdagent_streaming, 0, __ATOMIC_RELEASE);
}
