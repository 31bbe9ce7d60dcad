// The controller's time base: seconds since tdctl started (event "time").
#pragma once

#include <cstdint>

namespace tdctl {

/// Seconds (monotonic clock) since the first call in the process; call it
/// once early in main() to fix the origin.
double seconds_since_start();

/// The CLOCK_MONOTONIC time, ns, of `seconds` on the seconds_since_start()
/// scale (std::chrono::steady_clock is CLOCK_MONOTONIC on Linux). Monotone:
/// a later time never maps to a smaller value.
std::uint64_t monotonic_ns_at(double seconds);

/// The inverse: a CLOCK_MONOTONIC time, ns (of any process of the host: a
/// target's timestamps), on the seconds_since_start() scale; negative for a
/// time before tdctl started. Exact to the double's precision, no clock read.
double seconds_at_monotonic_ns(std::uint64_t ns);

/// CLOCK_MONOTONIC and CLOCK_BOOTTIME read back to back, ns: what a trace
/// needs to place its monotonic timestamps on the boot-time clock.
struct clock_pair {
    std::uint64_t monotonic_ns = 0;
    std::uint64_t boottime_ns = 0;
};
clock_pair read_clock_pair();

}  // namespace tdctl
