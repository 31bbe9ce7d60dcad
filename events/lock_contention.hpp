// Per-lock contention over the agent's lock events (`locks`): fed every
// TD_LOCK_TRY, TD_SLEEP and TD_READY message, in the order drained. A
// TD_LOCK_TRY says a thread found a lock taken (SPEC §5); what it was is
// told by the same thread's next report: the TD_SLEEP on that lock of a
// blocking call (pthread_mutex_lock...) makes it a contention, anything else
// — or nothing before the report — a trylock failure (pthread_mutex_trylock
// returned EBUSY: it never sleeps). A wait is the TD_SLEEP .. TD_READY of a
// contention, timed from the two messages' times (the controller's
// monotonic clock when each report was drained, before any stack was read).
// The waiter's stack, the lock's kind and its holder come with the TD_SLEEP.
// SLEEP/READY pairs that no LOCK_TRY opened (condition variables,
// semaphores, barriers, joins) are no lock's.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include <sys/types.h>

#include "events/event_message.hpp"
#include "events/stack_frame.hpp"

namespace tdctl::events {

/// Where waiters called the lock: their stack as the controller cut it (the
/// reporting library's frames dropped, core/locks/lock_probe.hpp).
struct lock_call_site {
    std::vector<stack_frame> frames;   ///< innermost first: the program's call into the lock function first
    std::uint64_t contentions = 0;     ///< contentions whose TD_SLEEP had this stack
    std::uint64_t wait_ns = 0;         ///< their waits, summed
};

/// One lock's contention over a report's span.
struct lock_stats {
    std::uint64_t address = 0;
    lock_kind kind = lock_kind::unknown;
    std::uint64_t contentions = 0;     ///< TD_LOCK_TRY messages a TD_SLEEP on the lock followed (blocking calls)
    std::uint64_t try_failures = 0;    ///< TD_LOCK_TRY messages no TD_SLEEP followed (pthread_mutex_trylock: EBUSY)
    std::uint64_t waits = 0;           ///< SLEEP..READY pairs closed in the span
    std::uint64_t wait_ns = 0;         ///< their total, ns
    std::uint64_t max_wait_ns = 0;
    std::uint64_t pri_inherit = 0;     ///< TD_PRI_INHERIT messages (PI mutexes)
    /// Owner TID read at the contention's TD_SLEEP → how many contentions it
    /// held the lock for; contentions whose owner could not be read are not here.
    std::map<pid_t, std::uint64_t> holders;
    std::map<pid_t, std::uint64_t> waiters;  ///< contending TID → contentions
    /// Most wait first (ties: most contentions); at most the number asked for.
    std::vector<lock_call_site> call_sites;
    std::uint64_t call_site_count = 0;  ///< distinct stacks before the cut
};

class lock_contention {
public:
    /// A call site keeps at most `site_frames` of the waiter's frames.
    explicit lock_contention(std::size_t site_frames = 64) : site_frames_(site_frames) {}

    /// One drained message; other events than the four lock ones are ignored.
    void add(const event_message& msg);

    /// The locks contended (or tried in vain) since the last clear(), most
    /// total wait first (ties: most contentions, then lower address), each
    /// with at most `sites_per_lock` call sites. A TD_LOCK_TRY whose thread
    /// has reported nothing since counts as a trylock failure here.
    std::vector<lock_stats> report(std::size_t sites_per_lock) const;

    /// Starts a new span (`locks --interval`): waits open now are kept and
    /// count in the span where they end; a TD_LOCK_TRY that report() counted
    /// as a trylock failure is not counted again.
    void clear();

    /// Contentions seen since the last clear(), over every lock.
    std::uint64_t contentions() const;
    /// Trylock failures since the last clear(), over every lock (as report()).
    std::uint64_t try_failures() const;

private:
    // A thread's contention in progress.
    struct open_wait {
        std::uint64_t lock = 0;
        bool slept = false;             // its TD_SLEEP came: a contention
        bool reported = false;          // counted as a trylock failure by an earlier span's report
        std::uint64_t sleep_ns = 0;
        std::vector<std::uint64_t> site;
    };
    struct site_total {
        std::vector<stack_frame> frames;
        std::uint64_t contentions = 0;
        std::uint64_t wait_ns = 0;
    };
    struct lock_entry {
        lock_stats stats;
        std::map<std::vector<std::uint64_t>, site_total> sites;
    };

    void on_lock_try(const event_message& msg);
    void on_sleep(const event_message& msg);
    void on_ready(const event_message& msg);
    // The thread's TD_LOCK_TRY that no TD_SLEEP followed: a trylock failure.
    void close_try(pid_t tid);
    lock_entry& entry_of(std::uint64_t lock);

    std::size_t site_frames_;
    std::unordered_map<std::uint64_t, lock_entry> locks_;
    std::unordered_map<pid_t, open_wait> open_;
};

/// "mutex", "rwlock", "spin" or "unknown".
const char* lock_kind_name(lock_kind kind);

}  // namespace tdctl::events
