// The controller's time base: seconds since tdctl started (event "time").
#pragma once

namespace tdctl {

/// Seconds (monotonic clock) since the first call in the process; call it
/// once early in main() to fix the origin.
double seconds_since_start();

}  // namespace tdctl
