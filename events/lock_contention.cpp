#include "events/lock_contention.hpp"

#include <algorithm>

#include "base/clock.hpp"

namespace tdctl::events {

namespace {

std::vector<std::uint64_t> site_key(const std::vector<stack_frame>& frames)
{
    std::vector<std::uint64_t> key;
    key.reserve(frames.size());
    for (const auto& f : frames)
        key.push_back(f.pc.value);
    return key;
}

}  // namespace

const char* lock_kind_name(lock_kind kind)
{
    switch (kind) {
    case lock_kind::mutex: return "mutex";
    case lock_kind::rwlock: return "rwlock";
    case lock_kind::spin: return "spin";
    case lock_kind::semaphore: return "semaphore";
    case lock_kind::unknown: break;
    }
    return "unknown";
}

lock_contention::lock_entry& lock_contention::entry_of(std::uint64_t lock)
{
    auto& e = locks_[lock];
    e.stats.address = lock;
    return e;
}

void lock_contention::add(const event_message& msg)
{
    switch (msg.event) {
    case TD_LOCK_TRY: on_lock_try(msg); break;
    case TD_SLEEP: on_sleep(msg); break;
    case TD_READY: on_ready(msg); break;
    case TD_PRI_INHERIT: ++entry_of(msg.data).stats.pri_inherit; break;
    default: break;
    }
}

void lock_contention::close_try(pid_t tid)
{
    auto it = open_.find(tid);
    if (it == open_.end() || it->second.slept)
        return;
    if (!it->second.reported)
        ++entry_of(it->second.lock).stats.try_failures;
    open_.erase(it);
}

void lock_contention::on_lock_try(const event_message& msg)
{
    // The thread's previous try, if no SLEEP followed it, was a trylock's;
    // one whose READY never came is dropped.
    close_try(msg.tid.value);
    entry_of(msg.data);
    open_[msg.tid.value] = open_wait{msg.data, false, false, 0, {}};
}

void lock_contention::on_sleep(const event_message& msg)
{
    auto it = open_.find(msg.tid.value);
    if (it == open_.end())
        return;  // a condition variable, semaphore, barrier or join
    if (it->second.lock != msg.data) {
        close_try(msg.tid.value);  // the same, after a trylock failure
        return;
    }
    if (it->second.slept)
        return;
    it->second.slept = true;
    it->second.sleep_ns = monotonic_ns_at(msg.time);
    auto& e = entry_of(msg.data);
    ++e.stats.contentions;
    ++e.stats.waiters[msg.tid.value];
    if (msg.lock != lock_kind::unknown)
        e.stats.kind = msg.lock;
    if (msg.lock_owner)
        ++e.stats.holders[*msg.lock_owner];
    auto frames = msg.frames;
    if (frames.size() > site_frames_)
        frames.resize(site_frames_);
    auto key = site_key(frames);
    auto& site = e.sites[key];
    if (site.frames.empty())
        site.frames = std::move(frames);
    ++site.contentions;
    it->second.site = std::move(key);
}

void lock_contention::on_ready(const event_message& msg)
{
    auto it = open_.find(msg.tid.value);
    if (it == open_.end())
        return;
    if (!it->second.slept) {
        close_try(msg.tid.value);  // a READY of another object after a trylock failure
        return;
    }
    if (it->second.lock != msg.data)
        return;
    const std::uint64_t now = monotonic_ns_at(msg.time);
    const std::uint64_t wait = now > it->second.sleep_ns ? now - it->second.sleep_ns : 0;
    auto& e = entry_of(msg.data);
    ++e.stats.waits;
    e.stats.wait_ns += wait;
    e.stats.max_wait_ns = std::max(e.stats.max_wait_ns, wait);
    if (auto site = e.sites.find(it->second.site); site != e.sites.end())
        site->second.wait_ns += wait;
    open_.erase(it);
}

void lock_contention::clear()
{
    locks_.clear();
    for (auto& [tid, w] : open_)
        if (!w.slept)
            w.reported = true;
}

std::uint64_t lock_contention::contentions() const
{
    std::uint64_t n = 0;
    for (const auto& [addr, e] : locks_)
        n += e.stats.contentions;
    return n;
}

std::uint64_t lock_contention::try_failures() const
{
    std::uint64_t n = 0;
    for (const auto& s : report(0))
        n += s.try_failures;
    return n;
}

std::vector<lock_stats> lock_contention::report(std::size_t sites_per_lock) const
{
    std::vector<lock_stats> out;
    out.reserve(locks_.size());
    // Tries whose thread reported nothing since: trylock failures so far.
    std::unordered_map<std::uint64_t, std::uint64_t> pending;
    for (const auto& [tid, w] : open_)
        if (!w.slept && !w.reported)
            ++pending[w.lock];
    for (const auto& [addr, e] : locks_) {
        lock_stats s = e.stats;
        if (auto p = pending.find(addr); p != pending.end())
            s.try_failures += p->second;
        for (const auto& [key, site] : e.sites)
            s.call_sites.push_back(lock_call_site{site.frames, site.contentions, site.wait_ns});
        std::sort(s.call_sites.begin(), s.call_sites.end(), [](const auto& a, const auto& b) {
            return a.wait_ns != b.wait_ns ? a.wait_ns > b.wait_ns : a.contentions > b.contentions;
        });
        s.call_site_count = s.call_sites.size();
        if (s.call_sites.size() > sites_per_lock)
            s.call_sites.resize(sites_per_lock);
        out.push_back(std::move(s));
    }
    std::sort(out.begin(), out.end(), [](const lock_stats& a, const lock_stats& b) {
        if (a.wait_ns != b.wait_ns)
            return a.wait_ns > b.wait_ns;
        if (a.contentions != b.contentions)
            return a.contentions > b.contentions;
        return a.address < b.address;
    });
    return out;
}

}  // namespace tdctl::events
