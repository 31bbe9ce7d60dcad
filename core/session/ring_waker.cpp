#include "core/session/ring_waker.hpp"

#include <csignal>
#include <ctime>

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tdctl::core {

namespace {

std::uint32_t load(std::uint32_t* word)
{
    return std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire);
}

}  // namespace

ring_waker::ring_waker(std::uint32_t* word, std::function<void()> on_wake) : word_(word), on_wake_(std::move(on_wake))
{
    // Every signal stays blocked in this thread: they are the main thread's
    // (through its signal descriptors).
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    // The word as it is now, not when the thread first runs: a change in
    // between is a wake too.
    const std::uint32_t seen = load(word_);
    thread_ = std::thread([this, seen] { run(seen); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ring_waker::~ring_waker()
{
    stopping_.store(true);
    // The word changes too, so that a thread between its look at stopping_
    // and its sleep does not sleep (the agent only ever adds to it). Not
    // FUTEX_PRIVATE_FLAG: the word is in a shared mapping.
    std::atomic_ref<std::uint32_t>(*word_).fetch_add(1, std::memory_order_release);
    ::syscall(SYS_futex, word_, FUTEX_WAKE, 1, nullptr, nullptr, 0);
    thread_.join();
}

void ring_waker::run(std::uint32_t seen)
{
    while (!stopping_.load()) {
        timespec bound{0, sleep_bound_ms * 1000000L};
        // EAGAIN: the word changed before the sleep; ETIMEDOUT, EINTR: look.
        ::syscall(SYS_futex, word_, FUTEX_WAIT, seen, &bound, nullptr, 0);
        const std::uint32_t now = load(word_);
        if (now != seen && !stopping_.load()) {
            seen = now;
            on_wake_();
        }
    }
}

}  // namespace tdctl::core
