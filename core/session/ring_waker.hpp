// A burst that would fill a ring before tdctl's next drain: the agent bumps
// the region's wake word when a ring becomes half full and FUTEX_WAKEs it
// (agent/event_rings.c). A ring_waker is the thread in tdctl asleep on that
// word, in tdctl's own MAP_SHARED mapping of the agent's memfd (a shared
// futex: the key is the file page, so both mappings name one word); each
// change calls `on_wake`, which ends the pump's wait so that it drains now.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

namespace tdctl::core {

class ring_waker {
public:
    /// Starts the thread on `word` (4 bytes, aligned, in a shared mapping
    /// that outlives this object). `on_wake` runs on that thread, once per
    /// change of the word it sees (several changes while it runs: once).
    ring_waker(std::uint32_t* word, std::function<void()> on_wake);
    /// Stops the thread (the word bumped and woken by tdctl) and joins it.
    ~ring_waker();
    ring_waker(const ring_waker&) = delete;
    ring_waker& operator=(const ring_waker&) = delete;

    /// How long the thread sleeps on an unchanged word before it looks
    /// again, ms: a bound, should a wake be missed, not a poll interval.
    static constexpr int sleep_bound_ms = 200;

private:
    /// The thread: sleeps while the word is `seen`, calls on_wake_ when not.
    void run(std::uint32_t seen);

    std::uint32_t* word_;
    std::function<void()> on_wake_;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace tdctl::core
