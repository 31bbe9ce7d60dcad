// What `--trace FILE` writes, independent of the file format: the target
// process, one record per thread *lifetime* (a TID reused later is a new
// lifetime) and, on each, what happened in time order. Built by
// trace_recorder from event messages and the session's LWP lists; written by
// perfetto_trace (protobuf TracePackets) or chrome_trace (Chrome JSON).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include <sys/types.h>

#include "events/event_message.hpp"

namespace tdctl::events {

/// One key/value attached to a trace event: a Perfetto debug annotation, an
/// entry of a Chrome event's "args".
struct trace_arg {
    enum class kind { uint, sint, string, pointer, boolean };
    std::string name;
    kind type = kind::uint;
    std::uint64_t u = 0;   ///< uint, pointer, boolean (0/1)
    std::int64_t i = 0;    ///< sint
    std::string s;         ///< string

    static trace_arg of_uint(std::string n, std::uint64_t v) { return {std::move(n), kind::uint, v, 0, {}}; }
    static trace_arg of_int(std::string n, std::int64_t v) { return {std::move(n), kind::sint, 0, v, {}}; }
    static trace_arg of_string(std::string n, std::string v) { return {std::move(n), kind::string, 0, 0, std::move(v)}; }
    static trace_arg of_pointer(std::string n, std::uint64_t v) { return {std::move(n), kind::pointer, v, 0, {}}; }
    static trace_arg of_bool(std::string n, bool v) { return {std::move(n), kind::boolean, v ? 1u : 0u, 0, {}}; }
};

/// Something on a lifetime's track, at ts_ns (CLOCK_MONOTONIC, ns).
struct trace_mark {
    enum class kind {
        begin,    ///< a slice begins (the lifetime itself first, then waits nested in it)
        end,      ///< the innermost open slice ends; its args are merged into the slice
        instant,  ///< an event message
        rename,   ///< the thread's name changed to `name`
    };
    kind what = kind::instant;
    std::uint64_t ts_ns = 0;
    std::string name;
    std::vector<trace_arg> args;
    std::uint64_t flow_out = 0;   ///< a flow starts here (TD_CREATE → the new lifetime), 0 = none
    std::uint64_t flow_in = 0;    ///< a flow ends here, 0 = none
    /// An instant's event message, kept as it is: its fields become
    /// annotations only when the file is written (trace_annotations), so
    /// recording it costs one copy.
    std::optional<event_message> message;
};

/// How a lifetime's slice began and ended.
enum class lifetime_start { created, at_trace_start, first_seen };
enum class lifetime_end { death, at_trace_end, gone };

/// One thread lifetime: a track of its own.
struct thread_lifetime {
    std::uint64_t uuid = 0;        ///< unique in the trace (never the process track's)
    pid_t tid = 0;
    int reuse = 0;                 ///< 0 for the first lifetime of this TID in the trace, 1 for the next...
    std::string first_name;        ///< comm when the lifetime began
    std::string last_name;         ///< comm at the last event or listing
    lifetime_start start = lifetime_start::created;
    lifetime_end end = lifetime_end::at_trace_end;
    /// Time order; the first is the lifetime's begin, the last its end.
    /// How it began and ended (`start`, `end`, the names) is added to those
    /// two marks' annotations when the file is written.
    std::vector<trace_mark> marks;
};

/// A whole trace.
struct trace_model {
    pid_t pid = 0;
    std::string process_name;
    std::uint64_t process_uuid = 0;
    std::uint64_t begin_ns = 0;             ///< CLOCK_MONOTONIC when the trace began (attach, launch)
    std::uint64_t end_ns = 0;               ///< ... and ended (detach, exit)
    std::uint64_t boottime_at_begin_ns = 0; ///< CLOCK_BOOTTIME read with begin_ns's clock (for a clock snapshot)
    std::uint64_t monotonic_at_begin_ns = 0;
    std::vector<thread_lifetime> lifetimes; ///< in the order they began
    std::vector<trace_mark> process_marks;  ///< instants on the process track (exec, exit, unplaced events)
};

}  // namespace tdctl::events
