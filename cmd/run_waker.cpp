#include "cmd/run_waker.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <csignal>
#include <cstdint>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::cmd {

namespace {
void poke(int fd)
{
    std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
}
}  // namespace

run_waker::run_waker(int signal_fd, std::function<void()> flush) : flush_(std::move(flush)), signal_fd_(signal_fd)
{
    int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
        log::debug("run_waker: eventfd: {}", std::strerror(errno));
        return;
    }
    control_.reset(fd);
    if (!ptrace::waiter::can_wake_blocked_wait()) {
        log::debug("run_waker: no wake child can be made here; waiting with poll()");
        return;
    }
    // Every signal stays blocked in this thread: they are the tracer's to take.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    try {
        thread_ = std::thread([this] { run(); });
        usable_ = true;
    } catch (const std::system_error& e) {
        log::debug("run_waker: {}", e.what());
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

run_waker::~run_waker()
{
    if (!thread_.joinable())
        return;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    poke(control_.get());
    thread_.join();
}

void run_waker::begin_run(std::optional<clock::time_point> deadline)
{
    if (!usable_)
        return;
    attention_.store(false);
    {
        std::lock_guard lock(mutex_);
        running_ = true;
        deadline_ = deadline;
    }
    poke(control_.get());
}

void run_waker::end_run()
{
    if (!usable_)
        return;
    {
        std::lock_guard lock(mutex_);
        running_ = false;
        deadline_.reset();
    }
    // No poke: the thread finds the run over at its next tick and sleeps.
}

void run_waker::run()
{
    for (;;) {
        bool running = false;
        std::optional<clock::time_point> deadline;
        {
            std::lock_guard lock(mutex_);
            if (stopping_)
                return;
            running = running_;
            deadline = deadline_;
        }
        int timeout_ms = -1;
        if (running) {
            timeout_ms = static_cast<int>(flush_interval.count());
            if (deadline) {
                auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - clock::now()).count();
                timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, timeout_ms));
            }
        }
        // A signal the tracer has been told of stays on the descriptor until
        // it reads it: not looked at again meanwhile, or this would spin.
        const bool watch_signals = running && !attention_.load();
        pollfd fds[2] = {{control_.get(), POLLIN, 0}, {watch_signals ? signal_fd_ : -1, POLLIN, 0}};
        int n = ::poll(fds, 2, timeout_ms);
        if (n < 0 && errno != EINTR)
            return;
        if ((fds[0].revents & POLLIN) != 0) {
            std::uint64_t count = 0;
            (void)!::read(control_.get(), &count, sizeof count);
        }
        if (!running)
            continue;
        bool due = (fds[1].revents & POLLIN) != 0 || (deadline && clock::now() >= *deadline);
        if (due && !attention_.load())
            attention_.store(true);
        // A wake that could not be made (no wait blocked yet, or clone failed)
        // is tried again at the next tick while the flag stands.
        if (attention_.load())
            (void)ptrace::waiter::wake_blocked_wait();
        // Under the lock: once end_run() has returned, nothing is written here.
        std::lock_guard lock(mutex_);
        if (running_)
            flush_();
    }
}

}  // namespace tdctl::cmd
