// A trace_model as Chrome trace JSON (the "JSON Object Format" that
// chrome://tracing, Perfetto and speedscope read): {"traceEvents": [...],
// "displayTimeUnit": "ns", "otherData": {...}}.
#pragma once

#include <string>

#include "events/trace_model.hpp"

namespace tdctl::events {

/// The whole trace as one JSON document. Times ("ts") are CLOCK_MONOTONIC
/// in µs (fractions keep the ns). "M" events name the process and each
/// thread (its last name); a lifetime is a "B"/"E" pair named "thread",
/// waits nest inside it, event messages are "i" instants with "s":"t" and
/// their fields in "args". JSON has one track per tid, so a TID's later
/// lifetimes get a tid of their own (1000000000 + the lifetime's uuid) named
/// "NAME (tid N, lifetime K)"; "args.tid" always holds the real TID.
std::string chrome_trace_json(const trace_model& model);

}  // namespace tdctl::events
