#include "base/clock.hpp"

#include <chrono>

namespace tdctl {

double seconds_since_start()
{
    static const auto origin = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
}

}  // namespace tdctl
