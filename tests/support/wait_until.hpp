// Bounded polling for conditions a test cannot be told about (a thread shows
// up in /proc, a tracer lets go).
#pragma once

#include <chrono>
#include <thread>

namespace tdctl::test {

/// Calls pred every `interval` until it returns true (then true) or timeout
/// passes (then false, after one last call).
template <typename Pred>
bool wait_until(Pred&& pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds interval = std::chrono::milliseconds{5})
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred())
            return true;
        std::this_thread::sleep_for(interval);
    }
    return pred();
}

}  // namespace tdctl::test
