// Counts over the event messages of a session, for `summary` and the end of
// `watch`: messages per event type, threads created and ended per creating
// call site, lifetimes per start routine. Fed every printed message (so its
// counts are those of the lines printed); a mark lets one command's share
// be summarised apart from the session's.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include <thread_db.h>

#include "events/event_message.hpp"
#include "events/event_sink.hpp"

namespace tdctl::events {

/// Threads created at one call site.
struct call_site_count {
    std::uint64_t call_site = 0;   ///< return address into pthread_create's caller; 0 = unknown
    std::uint64_t created = 0;     ///< TD_CREATE messages with this call site
    std::uint64_t ended = 0;       ///< of those threads, how many had their TD_DEATH since
};

/// Lifetimes (TD_CREATE to TD_DEATH of the same thread, both seen), ns.
struct lifetime_stats {
    std::uint64_t start_routine = 0;  ///< 0 = unknown
    std::uint64_t count = 0;
    std::uint64_t min_ns = 0, median_ns = 0, p95_ns = 0, max_ns = 0;
};

/// A summary: of the whole session, or since a mark.
struct summary_counts {
    std::uint64_t messages = 0;
    std::array<std::uint64_t, TD_MAX_EVENT_NUM + 1> per_event{};  ///< by td_event_e number
    std::uint64_t created = 0, ended = 0;
    std::uint64_t created_alive = 0;           ///< created (in the range) and not ended yet
    std::vector<call_site_count> call_sites;   ///< most threads created first (ties: lower address)
    std::vector<lifetime_stats> lifetimes;     ///< most lifetimes first (ties: lower address)
};

class event_summary final : public event_sink {
public:
    /// `start_routine_of` gives a TD_CREATE message's new thread's start
    /// routine (0 when unknown); asked once per TD_CREATE.
    explicit event_summary(std::function<std::uint64_t(const event_message&)> start_routine_of);

    void write(const event_message& msg) override;

    /// Where a command's share begins.
    std::size_t mark() const { return log_.size(); }
    /// The counts of the messages since `from` (a mark; 0 = the session).
    summary_counts counts(std::size_t from = 0) const;

private:
    // One message, reduced to what the counts need.
    struct entry {
        td_event_e event;
        pid_t tid;
        std::uint64_t time_ns;
        std::uint64_t call_site;
        std::uint64_t start_routine;
    };
    std::function<std::uint64_t(const event_message&)> start_routine_of_;
    std::vector<entry> log_;
};

/// The value below which `fraction` of `sorted` lies (nearest rank); 0 when empty.
std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double fraction);

}  // namespace tdctl::events
