// The records of `summary` and of the summary at the end of `watch`
// (events/event_summary counts them): one head line, one row per creating
// call site (top N), one row per start routine's lifetimes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/session/session.hpp"
#include "events/event_summary.hpp"
#include "events/json_format.hpp"

namespace tdctl::cmd {

using events::json_record;

/// Call sites a summary shows unless told otherwise (`summary --top N`).
inline constexpr std::size_t summary_default_top = 10;

/// An address as people read it: "function+0xoff" (demangled) and the
/// module's file name; both "" when the session knows no module there.
struct code_location {
    std::string symbol;
    std::string module;
};
code_location locate(core::session& session, std::uint64_t addr);

/// Counts per event type, threads created / ended, still alive.
struct summary_record {
    std::string command;                 ///< "watch" or "summary"
    events::summary_counts counts;
    std::size_t alive = 0;               ///< LWPs of the target now
    std::size_t call_sites_shown = 0;    ///< rows that follow (top N)
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// One creating call site: threads created there and how many have ended.
struct call_site_record {
    std::string command;
    std::size_t rank = 0;                ///< 1 = most threads created
    events::call_site_count site;
    code_location where;
    json_record json() const;
    std::string text() const;
};

/// Lifetimes of the threads of one start routine (seconds in JSON, ms in text).
struct lifetime_record {
    std::string command;
    events::lifetime_stats stats;
    code_location where;
    json_record json() const;
    std::string text() const;
};

/// Column headings of the two tables (text only), prefixed with the command.
std::string call_site_heading(const std::string& command, std::size_t shown, std::size_t total);
std::string lifetime_heading(const std::string& command);

}  // namespace tdctl::cmd
