#include "base/clock.hpp"

#include <chrono>
#include <cmath>
#include <ctime>

namespace tdctl {

namespace {

const std::chrono::steady_clock::time_point& origin()
{
    static const auto t = std::chrono::steady_clock::now();
    return t;
}

std::uint64_t ns_of(clockid_t id)
{
    timespec ts{};
    ::clock_gettime(id, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

double seconds_since_start()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin()).count();
}

std::uint64_t monotonic_ns_at(double seconds)
{
    const auto base = std::chrono::duration_cast<std::chrono::nanoseconds>(origin().time_since_epoch()).count();
    const double offset = seconds < 0 ? 0.0 : std::llround(seconds * 1e9);
    return static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(offset);
}

double seconds_at_monotonic_ns(std::uint64_t ns)
{
    const auto base = std::chrono::duration_cast<std::chrono::nanoseconds>(origin().time_since_epoch()).count();
    return (static_cast<double>(static_cast<std::int64_t>(ns - static_cast<std::uint64_t>(base)))) / 1e9;
}

clock_pair read_clock_pair()
{
    clock_pair p;
    p.monotonic_ns = ns_of(CLOCK_MONOTONIC);
    p.boottime_ns = ns_of(CLOCK_BOOTTIME);
    return p;
}

}  // namespace tdctl
