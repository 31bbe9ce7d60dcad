// The records of `locks` (events/lock_contention counts them): one head
// line per report, then one record per lock, most total wait first, each
// with its holders, its waiters and its waiters' top call sites.
#pragma once

#include <cstddef>
#include <string>

#include "cmd/summary_view.hpp"
#include "events/json_format.hpp"
#include "events/lock_contention.hpp"

namespace tdctl::cmd {

/// Locks a report shows unless told otherwise (`locks --top N`).
inline constexpr std::size_t locks_default_top = 10;
/// Call sites shown per lock.
inline constexpr std::size_t locks_sites_per_lock = 3;
/// Frames per waiter's stack unless told otherwise (`locks --bt=DEPTH`).
inline constexpr long long locks_default_depth = 16;

/// One report's head: its span and how many locks it shows.
struct locks_report_record {
    std::size_t report = 0;          ///< 1 for the first (--interval: one per interval)
    double span = 0;                 ///< seconds the report covers
    std::size_t locks = 0;           ///< locks contended in the span
    std::size_t shown = 0;           ///< lock records that follow (top N)
    std::uint64_t contentions = 0;   ///< over every lock
    std::uint64_t try_failures = 0;  ///< trylock failures (EBUSY), over every lock
    double time = 0;
    /// The target's own locks this report cannot see, in one sentence (a
    /// JVM's monitors, CPython's locks); empty when none are known.
    std::string unseen;
    json_record json() const;
    std::string text() const;
};

/// One contended lock. Times are seconds in JSON, ms in text.
struct lock_record {
    std::size_t report = 0;
    std::size_t rank = 0;            ///< 1 = most total wait
    events::lock_stats stats;
    code_location where;             ///< the lock's symbol (a static or global object), if any
    json_record json() const;
    std::string text() const;
};

}  // namespace tdctl::cmd
