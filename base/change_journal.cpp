#include "base/change_journal.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/error.hpp"
#include "base/log.hpp"

namespace tdctl {

namespace {

journal_storage* g_shared = nullptr;

std::size_t block_bytes(std::uint32_t capacity)
{
    return sizeof(journal_storage) + std::size_t{capacity} * sizeof(journal_slot);
}

journal_storage* map_block(std::uint32_t capacity, int flags)
{
    void* p = ::mmap(nullptr, block_bytes(capacity), PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (p == MAP_FAILED)
        throw error::from_errno(errno, "mapping the change journal");
    auto* s = new (p) journal_storage{};
    s->capacity = capacity;
    return s;
}

// Slots newest first.
std::vector<journal_slot*> live_newest_first(journal_storage& s)
{
    std::vector<journal_slot*> live;
    for (std::uint32_t i = 0; i < s.high_water && i < s.capacity; ++i)
        if (s.slots()[i].live == 1)
            live.push_back(&s.slots()[i]);
    std::sort(live.begin(), live.end(), [](auto* a, auto* b) { return a->sequence > b->sequence; });
    return live;
}

}  // namespace

const char* change_kind_name(change_kind k)
{
    switch (k) {
    case change_kind::code: return "breakpoint bytes";
    case change_kind::global_mask: return "global event mask";
    case change_kind::thread_mask: return "thread event mask";
    case change_kind::thread_enable: return "thread enable flag";
    case change_kind::initial_flag: return "initial report flag";
    case change_kind::list_head: return "message list link";
    case change_kind::got_entry: return "GOT entry";
    case change_kind::injected: return "injected bytes";
    }
    return "change";
}

restore_tally& restore_tally::operator+=(const restore_tally& o)
{
    restored += o.restored;
    unchanged += o.unchanged;
    left += o.left;
    failed += o.failed;
    return *this;
}

journal_storage& journal_storage::create_shared(std::uint32_t capacity)
{
    journal_storage* s = map_block(capacity, MAP_SHARED);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    int err = pthread_mutex_init(&s->tracer_alive, &attr);
    pthread_mutexattr_destroy(&attr);
    if (err != 0)
        throw error::from_errno(err, "setting up the change journal's tracer mutex");
    g_shared = s;
    return *g_shared;
}

void journal_storage::hold_as_tracer()
{
    if (int err = pthread_mutex_lock(&tracer_alive); err != 0 && err != EOWNERDEAD)
        throw error::from_errno(err, "taking the change journal's tracer mutex");
    __atomic_store_n(&tracer_tid, static_cast<std::int32_t>(::gettid()), __ATOMIC_RELEASE);
}

journal_storage::tracer_state journal_storage::wait_for_tracer_death(int timeout_ms)
{
    timespec deadline{};
    ::clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += static_cast<long>(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    // The tracer takes the mutex first thing after the fork.
    if (__atomic_load_n(&tracer_tid, __ATOMIC_ACQUIRE) == 0) {
        ::usleep(static_cast<useconds_t>(std::min(timeout_ms, 5)) * 1000);
        return tracer_state::alive;
    }
    int err = pthread_mutex_clocklock(&tracer_alive, CLOCK_MONOTONIC, &deadline);
    if (err == EOWNERDEAD) {
        pthread_mutex_consistent(&tracer_alive);
        return tracer_state::dead;
    }
    if (err == ETIMEDOUT)
        return tracer_state::alive;
    if (err == 0)
        pthread_mutex_unlock(&tracer_alive);
    return tracer_state::unusable;
}

journal_storage* journal_storage::shared() { return g_shared; }

std::uint64_t process_start_time(pid_t pid)
{
    // The main thread's own stat file: the same start time as the process's
    // /proc/PID/stat, without the kernel summing every thread's CPU time and
    // faults to print that one (O(threads)).
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line))
        return 0;
    // Field 2 (comm) may hold spaces and parentheses: count from its end.
    auto close = line.rfind(')');
    if (close == std::string::npos)
        return 0;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int n = 3; n <= 22 && rest >> field; ++n)
        if (n == 22)
            return std::strtoull(field.c_str(), nullptr, 10);
    return 0;
}

// ---------------------------------------------------------------- journal

change_journal::change_journal(target_memory& memory, pid_t pid) : memory_(memory)
{
    journal_storage* shared = journal_storage::shared();
    if (shared != nullptr && shared->claimed == 0) {
        storage_ = shared;
        shared_ = true;
        storage_->high_water = 0;
        storage_->next_sequence = 1;
        storage_->start_time = process_start_time(pid);
        storage_->pid = pid;
        storage_->claimed = 1;
    } else {
        storage_ = map_block(journal_storage::default_capacity, MAP_PRIVATE);
        storage_->pid = pid;
        storage_->claimed = 1;
    }
}

change_journal::~change_journal() noexcept
{
    try {
        auto t = restore_all();
        if (t.failed > 0)
            log::warning("{} change(s) to process {} could not be put back", t.failed, storage_->pid);
        log::debug("journal of process {}: {} restored, {} left alone", storage_->pid, t.restored, t.left);
    } catch (const std::exception& e) {
        log::warning("restoring process {}: {}", storage_->pid, e.what());
    }
    storage_->claimed = 0;
    storage_->pid = 0;
    if (!shared_)
        ::munmap(storage_, block_bytes(storage_->capacity));
}

journal_slot& change_journal::slot_for(target_addr address, std::size_t length, change_kind kind,
                                       const std::optional<change_guard>& guard, std::span<const std::byte> original,
                                       std::uint8_t flags)
{
    if (length == 0 || length > journal_storage::max_change_bytes)
        throw std::logic_error(fmt::format("journal: {} bytes at {}", length, address));
    if (auto it = index_.find(address); it != index_.end()) {
        journal_slot& s = storage_->slots()[it->second];
        if (s.length != length)
            throw std::logic_error(fmt::format("journal: {} bytes at {}, journaled as {}", length, address, s.length));
        return s;
    }
    if (original.size() < length)
        throw std::logic_error(fmt::format("journal: no original bytes for {}", address));
    std::uint32_t index;
    if (!free_.empty()) {
        index = free_.back();
        free_.pop_back();
    } else {
        if (storage_->high_water >= storage_->capacity)
            throw error::target(fmt::format("the change journal is full ({} changes)", storage_->capacity));
        index = storage_->high_water;
    }
    journal_slot& s = storage_->slots()[index];
    s = journal_slot{};
    s.kind = kind;
    s.flags = flags;
    s.length = static_cast<std::uint8_t>(length);
    s.sequence = storage_->next_sequence++;
    s.address = address.value;
    if (guard) {
        s.guard_address = guard->address.value;
        s.guard_length = guard->length;
        s.guard_value = guard->value;
    }
    std::copy_n(original.begin(), length, s.original.begin());
    s.written = s.original;
    s.previous = s.original;
    // Complete before it counts: a tracer that dies here leaves a free slot.
    __atomic_store_n(&s.live, 1u, __ATOMIC_RELEASE);
    if (index == storage_->high_water)
        __atomic_store_n(&storage_->high_water, index + 1, __ATOMIC_RELEASE);
    index_[address] = index;
    return s;
}

void change_journal::note(target_addr address, std::span<const std::byte> original, std::span<const std::byte> value,
                          change_kind kind, std::optional<change_guard> guard, std::uint8_t flags)
{
    const bool is_new = !index_.contains(address);
    journal_slot& s = slot_for(address, value.size(), kind, guard, original, flags);
    if (is_new)   // one line per entry (TDCTL_DEBUG): what a test compares before and after a session
        log::debug("journal: {} {} bytes at {:#x}", change_kind_name(kind), value.size(), address.value);
    const bool was_settled = (s.flags & journal_slot::settled) != 0;
    if (marked_ && !at_mark_.contains(address))
        at_mark_[address] = is_new || was_settled ? s.original : bytes_now(address, s);
    // The guard names whose the change is now (a record may have passed to
    // another thread meanwhile); a settled entry starts a new change.
    if (!is_new && (guard || was_settled))
        set_guard(s, guard);
    if (was_settled)
        __atomic_store_n(&s.flags, static_cast<std::uint8_t>(s.flags & ~journal_slot::settled), __ATOMIC_RELEASE);
    // Both the value before and the value after this write count as ours
    // until the write is known done: the tracer may die between the two.
    s.previous = s.written;
    std::copy(value.begin(), value.end(), s.written.begin());
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

std::array<std::byte, journal_storage::max_change_bytes> change_journal::bytes_now(target_addr address,
                                                                                   const journal_slot& s)
{
    // The target's own bytes: it may have changed them itself since the
    // last write (a thread record reset for a new thread).
    std::array<std::byte, journal_storage::max_change_bytes> now{};
    if (memory_.read(address, std::span(now.data(), s.length)) != s.length)
        return s.written;
    return now;
}

bool change_journal::write(target_addr address, std::span<const std::byte> value, change_kind kind,
                           std::optional<change_guard> guard)
{
    if (!index_.contains(address)) {
        std::array<std::byte, journal_storage::max_change_bytes> original{};
        if (value.empty() || value.size() > original.size())
            throw std::logic_error(fmt::format("journal: {} bytes at {}", value.size(), address));
        if (memory_.read(address, std::span(original.data(), value.size())) != value.size())
            return false;
        note(address, std::span(original.data(), value.size()), value, kind, guard);
    } else {
        note(address, value, value, kind, guard);
    }
    return memory_.write(address, value);
}

void change_journal::free_slot(std::uint32_t index)
{
    __atomic_store_n(&storage_->slots()[index].live, 0u, __ATOMIC_RELEASE);
    free_.push_back(index);
}

change_journal::bytes_state change_journal::compare_to_ours(const journal_slot& s, std::span<const std::byte> now)
{
    bool differs = false;
    for (std::size_t i = 0; i < s.length; ++i) {
        if (now[i] == s.original[i])
            continue;
        if (now[i] != s.written[i] && now[i] != s.previous[i])
            return bytes_state::not_ours;
        differs = true;
    }
    return differs ? bytes_state::ours : bytes_state::original;
}

std::optional<change_guard> change_journal::guard_of(target_addr address) const
{
    auto it = index_.find(address);
    if (it == index_.end())
        return std::nullopt;
    const journal_slot& s = storage_->slots()[it->second];
    if ((s.flags & journal_slot::settled) != 0 || s.guard_length == 0)
        return std::nullopt;
    change_guard g;
    g.address = target_addr{s.guard_address};
    g.length = s.guard_length;
    g.value = s.guard_value;
    return g;
}

std::vector<std::byte> change_journal::put_back_bytes(target_addr address, std::span<const std::byte> now,
                                                      std::span<const std::byte> guard_now) const
{
    auto it = index_.find(address);
    if (it == index_.end())
        return {};
    const journal_slot& s = storage_->slots()[it->second];
    if ((s.flags & journal_slot::settled) != 0 || s.kind == change_kind::code || now.size() != s.length)
        return {};
    if (s.guard_length > 0 &&
        (guard_now.size() != s.guard_length || !std::equal(guard_now.begin(), guard_now.end(), s.guard_value.begin())))
        return {};
    if (compare_to_ours(s, now) != bytes_state::ours)
        return {};
    return std::vector<std::byte>(s.original.begin(), s.original.begin() + s.length);
}

restore_tally change_journal::restore_slot(journal_slot& s, target_memory& memory, std::size_t length)
{
    restore_tally t;
    std::array<std::byte, 8> guard{};
    if (s.guard_length > 0) {
        auto g = std::span(guard.data(), s.guard_length);
        if (memory.read(target_addr{s.guard_address}, g) != g.size() ||
            !std::equal(g.begin(), g.end(), s.guard_value.begin())) {
            ++t.left;
            return t;
        }
    }
    std::array<std::byte, journal_storage::max_change_bytes> now{};
    auto cur = std::span(now.data(), s.length);
    if (memory.read(target_addr{s.address}, cur) != cur.size()) {
        ++t.failed;
        return t;
    }
    switch (compare_to_ours(s, cur)) {
    case bytes_state::original: ++t.unchanged; return t;
    case bytes_state::not_ours: ++t.left; return t;  // someone else wrote here since: not ours to undo
    case bytes_state::ours: break;
    }
    // Lowest address first, byte by byte where code is concerned: a thread
    // running through it meets either the patch or the original, never a mix
    // that decodes to something else (the trap byte goes first).
    bool ok = true;
    if (s.kind == change_kind::code) {
        for (std::size_t i = 0; i < length; ++i)
            if (cur[i] != s.original[i])
                ok = memory.write(target_addr{s.address} + static_cast<std::int64_t>(i),
                                  std::span(&s.original[i], 1)) && ok;
    } else {
        ok = memory.write(target_addr{s.address}, std::span(s.original.data(), s.length));
    }
    ++(ok ? t.restored : t.failed);
    return t;
}

restore_tally change_journal::restore(target_addr address)
{
    restore_tally t;
    auto it = index_.find(address);
    if (it == index_.end()) {
        ++t.unchanged;
        return t;
    }
    journal_slot& s = storage_->slots()[it->second];
    if ((s.flags & journal_slot::settled) != 0)
        ++t.unchanged;  // put back (or not ours) when it settled
    else
        t = restore_slot(s, memory_, s.length);
    free_slot(it->second);
    at_mark_.erase(address);
    index_.erase(it);
    return t;
}

void change_journal::set_guard(journal_slot& s, const std::optional<change_guard>& guard)
{
    s.guard_length = guard ? guard->length : 0;
    s.guard_address = guard ? guard->address.value : 0;
    s.guard_value = guard ? guard->value : std::array<std::byte, 8>{};
}

restore_tally change_journal::settle(target_addr address, bool put_back)
{
    restore_tally t;
    auto it = index_.find(address);
    if (it == index_.end())
        return t;
    journal_slot& s = storage_->slots()[it->second];
    if ((s.flags & journal_slot::settled) != 0)
        return t;
    if (put_back)
        t = restore_slot(s, memory_, s.length);
    // Settled first: a surviving process passes the slot by from then on.
    __atomic_store_n(&s.flags, static_cast<std::uint8_t>(s.flags | journal_slot::settled), __ATOMIC_RELEASE);
    s.written = s.original;
    s.previous = s.original;
    if (marked_)
        at_mark_[address] = s.original;  // as if created after the mark
    return t;
}

bool change_journal::is_active(target_addr address) const
{
    auto it = index_.find(address);
    return it != index_.end() && (storage_->slots()[it->second].flags & journal_slot::settled) == 0;
}

bool change_journal::has_active(std::initializer_list<change_kind> kinds) const
{
    for (const auto& [address, index] : index_) {
        const journal_slot& s = storage_->slots()[index];
        if ((s.flags & journal_slot::settled) == 0 && std::find(kinds.begin(), kinds.end(), s.kind) != kinds.end())
            return true;
    }
    return false;
}

void change_journal::set_mark()
{
    at_mark_.clear();
    marked_ = true;
}

restore_tally change_journal::restore_to_mark(std::initializer_list<change_kind> kinds,
                                              const std::function<bool(target_addr)>& include)
{
    restore_tally t;
    if (!marked_)
        return t;
    marked_ = false;  // the writes below are not changes since the mark
    auto values = std::move(at_mark_);
    at_mark_.clear();
    for (const auto& [address, value] : values) {
        auto it = index_.find(address);
        if (it == index_.end())
            continue;
        const journal_slot& s = storage_->slots()[it->second];
        if ((s.flags & journal_slot::settled) != 0 || std::find(kinds.begin(), kinds.end(), s.kind) == kinds.end() ||
            !include(address))
            continue;
        ++(write(address, std::span(value.data(), s.length), s.kind) ? t.restored : t.failed);
    }
    return t;
}

restore_tally change_journal::restore_kinds(std::initializer_list<change_kind> kinds)
{
    restore_tally t;
    for (journal_slot* s : live_newest_first(*storage_)) {
        if (std::find(kinds.begin(), kinds.end(), s->kind) == kinds.end())
            continue;
        t += restore(target_addr{s->address});
    }
    return t;
}

restore_tally change_journal::restore_all()
{
    restore_tally t;
    for (journal_slot* s : live_newest_first(*storage_))
        t += restore(target_addr{s->address});
    return t;
}

void change_journal::forget(target_addr address)
{
    auto it = index_.find(address);
    if (it == index_.end())
        return;
    free_slot(it->second);
    at_mark_.erase(address);
    index_.erase(it);
}

void change_journal::forget_all()
{
    at_mark_.clear();
    for (const auto& [addr, index] : index_)
        __atomic_store_n(&storage_->slots()[index].live, 0u, __ATOMIC_RELEASE);
    index_.clear();
    free_.clear();
    __atomic_store_n(&storage_->high_water, 0u, __ATOMIC_RELEASE);
}

std::optional<std::vector<std::byte>> change_journal::original(target_addr address) const
{
    auto it = index_.find(address);
    if (it == index_.end())
        return std::nullopt;
    const journal_slot& s = storage_->slots()[it->second];
    return std::vector<std::byte>(s.original.begin(), s.original.begin() + s.length);
}

restore_tally change_journal::restore_abandoned(journal_storage& storage, target_memory& memory, bool first_pass)
{
    restore_tally t;
    bool more = false;
    for (journal_slot* s : live_newest_first(storage)) {
        if ((s->flags & journal_slot::settled) != 0) {
            s->live = 0;  // nothing of ours is left there
            continue;
        }
        bool partial = first_pass && (s->flags & journal_slot::landing_tail) != 0;
        try {
            t += restore_slot(*s, memory, partial ? 1 : s->length);
        } catch (const std::exception& e) {
            log::debug("restoring {} at {:#x}: {}", change_kind_name(s->kind), s->address, e.what());
            ++t.failed;
        }
        if (partial) {
            more = true;
            continue;
        }
        s->live = 0;
    }
    if (more)
        return t;
    storage.high_water = 0;
    storage.claimed = 0;
    storage.pid = 0;
    return t;
}

}  // namespace tdctl
