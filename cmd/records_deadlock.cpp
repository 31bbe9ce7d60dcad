// The text and JSON renderings of `deadlock`: the cycles of the wait-for
// graph, then every mutex wait with its owner, every wait on a semaphore
// used as a lock with its inferred holder, and every join with the thread
// it waits for.
#include <algorithm>

#include <fmt/format.h>

#include "cmd/records.hpp"
#include "events/event_sink.hpp"

namespace tdctl::cmd {

namespace {

// "thread", "gone" (not a thread of the target), "died" (robust or PI
// owner marked dead), "none" (no owner recorded: being released).
const char* owner_state(const core::mutex_wait& w)
{
    if (w.joined)
        return "thread";
    if (w.owner.owner_died)
        return "died";
    if (w.owner.tid == 0)
        return "none";
    return w.owner_lwp ? "thread" : "gone";
}

std::string owner_text(const core::mutex_wait& w)
{
    if (w.joined)
        return fmt::format("which has not ended");
    const std::string state = owner_state(w);
    if (state == "died")
        return "its owner died holding it (FUTEX_OWNER_DIED)";
    if (state == "none")
        return w.semaphore ? "not taken by any thread now" : "no owner recorded (being released)";
    if (state == "gone")
        return fmt::format("held by {} (owner gone: not a thread of this process)", w.owner.tid);
    return fmt::format("held by {}{}", w.owner_lwp->value,
                       w.semaphore ? " (inferred: the last thread that took it and has not posted it)" : "");
}

// A PI lock the kernel refused (it saw the cycle): glibc parks the thread.
constexpr const char* parked_note = "\n    (the kernel refused its FUTEX_LOCK_PI with EDEADLK; glibc parked it for ever)";

// A timed wait in restart_syscall: the mutex came from its stack.
constexpr const char* restarted_note = "\n    (a timed wait the kernel restarted; its mutex was found on its stack)";

// What w waits for: a mutex, or the end of a joined thread.
std::string mutex_text(const core::mutex_wait& w)
{
    if (w.joined)
        return fmt::format("the end of thread {} (pthread_join)", w.joined->value);
    if (w.semaphore)
        return fmt::format("semaphore {:#x} ({}used as a lock)", w.mutex.value, w.symbol.empty() ? "" : w.symbol + ", ");
    return fmt::format("mutex {:#x} ({}{})", w.mutex.value, w.symbol.empty() ? "" : w.symbol + ", ", w.kind.name());
}

json_record mutex_json(const core::mutex_wait& w)
{
    if (w.joined)
        return nullptr;
    return {{"address", events::hex_addr(w.mutex.value)},
            {"symbol", w.symbol.empty() ? json_record(nullptr) : json_record(w.symbol)},
            {"kind", w.semaphore ? std::string("semaphore") : w.kind.name()}};
}

// The TID a join waits for, or null for a mutex wait.
json_record joins_json(const core::mutex_wait& w)
{
    return w.joined ? json_record(w.joined->value) : json_record(nullptr);
}

json_record wait_json(const core::mutex_wait& w)
{
    json_record rec{{"tid", w.waiter.value}, {"name", w.name}, {"mutex", mutex_json(w)},
                    {"owner", w.owner.tid},   {"owner_source", w.owner.source}, {"owner_state", owner_state(w)},
                    {"owner_inferred", w.semaphore},
                    {"parked_after_edeadlk", w.parked_after_edeadlk}, {"restarted", w.restarted},
                    {"joins", joins_json(w)}};
    if (w.joined)
        rec["owner"] = w.joined->value;
    return rec;
}

json_record member_json(const core::deadlock_scan& scan, const std::vector<std::size_t>& cycle, std::size_t i)
{
    const core::mutex_wait& w = scan.waits[cycle[i]];
    const core::mutex_wait& before = scan.waits[cycle[(i + cycle.size() - 1) % cycle.size()]];
    json_record frames = json_record::array();
    for (const auto& f : w.frames)
        frames.push_back(events::frame_to_json(f));
    return {{"tid", w.waiter.value}, {"name", w.name},   {"holds", mutex_json(before)},
            {"wants", mutex_json(w)}, {"parked_after_edeadlk", w.parked_after_edeadlk}, {"restarted", w.restarted},
            {"joins", joins_json(w)}, {"joined_by", before.joined ? json_record(before.waiter.value) : json_record(nullptr)},
            {"frames", frames}};
}

std::string member_text(const core::deadlock_scan& scan, const std::vector<std::size_t>& cycle, std::size_t i)
{
    const core::mutex_wait& w = scan.waits[cycle[i]];
    const core::mutex_wait& before = scan.waits[cycle[(i + cycle.size() - 1) % cycle.size()]];
    // The member before waits for what this one holds: a mutex, or its end.
    const std::string holds = before.joined ? fmt::format("is joined by thread {}", before.waiter.value)
                                            : "holds " + mutex_text(before);
    std::string text = fmt::format("  thread {} ({}) {}\n    and wants {}, {}{}", w.waiter.value,
                                   events::printable_name(w.name), holds, mutex_text(w), owner_text(w),
                                   w.parked_after_edeadlk ? parked_note
                                   : w.restarted          ? restarted_note
                                                          : "");
    int n = 0;
    for (const auto& f : w.frames)
        text += "\n    " + events::format_frame_text(n++, f);
    return text;
}

std::size_t join_count(const core::deadlock_scan& scan)
{
    return static_cast<std::size_t>(std::ranges::count_if(scan.waits, [](const auto& w) { return w.joined.has_value(); }));
}

std::size_t semaphore_count(const core::deadlock_scan& scan)
{
    return static_cast<std::size_t>(std::ranges::count_if(scan.waits, [](const auto& w) { return w.semaphore; }));
}

std::string counts_text(const core::deadlock_scan& scan)
{
    // Waits that are not pthread mutexes, lock semaphores or joins (other
    // semaphores, condition variables, rwlocks, other futexes) are counted
    // but not looked into: a cycle through them is not seen.
    const std::size_t joins = join_count(scan);
    const std::size_t semaphores = semaphore_count(scan);
    const std::size_t mutexes = scan.waits.size() - joins - semaphores;
    return fmt::format("{} thread{} blocked on mutexes, {}{} in pthread_join, {} blocked on other things{}, {} running ({} thread{})",
                       mutexes, mutexes == 1 ? "" : "s",
                       semaphores != 0 ? fmt::format("{} on semaphores used as locks, ", semaphores) : std::string(),
                       joins, scan.blocked_other,
                       scan.blocked_other != 0 ? " (semaphores, condition variables, rwlocks: not analysed)" : "",
                       scan.running, scan.threads, scan.threads == 1 ? "" : "s");
}

}  // namespace

json_record deadlock_record::json() const
{
    json_record cycles = json_record::array();
    for (const auto& c : scan.cycles) {
        json_record members = json_record::array();
        for (std::size_t i = 0; i < c.size(); ++i)
            members.push_back(member_json(scan, c, i));
        cycles.push_back(members);
    }
    json_record waits = json_record::array();
    for (const auto& w : scan.waits)
        waits.push_back(wait_json(w));
    return {{"type", "deadlock"},          {"pid", pid},
            {"found", !scan.cycles.empty()}, {"threads", scan.threads},
            {"mutex_waits", scan.waits.size() - join_count(scan) - semaphore_count(scan)},
            {"semaphore_waits", semaphore_count(scan)}, {"join_waits", join_count(scan)},
            {"blocked_other", scan.blocked_other},
            {"running", scan.running},     {"cycles", cycles},
            {"waits", waits},              {"problems", scan.problems}};
}

std::string deadlock_record::text() const
{
    std::string text;
    if (scan.cycles.empty())
        text = "no deadlock among mutexes and joins: " + counts_text(scan);
    int n = 0;
    for (const auto& c : scan.cycles) {
        if (n > 0)
            text += "\n";
        text += fmt::format("deadlock {}: {} thread{} in a cycle", ++n, c.size(), c.size() == 1 ? "" : "s");
        for (std::size_t i = 0; i < c.size(); ++i)
            text += "\n" + member_text(scan, c, i);
    }
    if (!scan.cycles.empty())
        text += "\n" + counts_text(scan);
    for (const auto& w : scan.waits)
        text += fmt::format("\n  thread {} ({}) waits for {}, {}", w.waiter.value, events::printable_name(w.name),
                            mutex_text(w), owner_text(w));
    for (const auto& p : scan.problems)
        text += "\n  not examined: " + p;
    return text;
}

}  // namespace tdctl::cmd
