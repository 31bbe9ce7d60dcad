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

void run_waker::begin_run(int watch_fd)
{
    if (!usable_)
        return;
    attention_.store(false);
    {
        std::lock_guard lock(mutex_);
        running_ = true;
        watch_fd_ = watch_fd;
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
        watch_fd_ = -1;
    }
    // No poke: the thread finds the run over at its next tick and sleeps.
}

void run_waker::run()
{
    for (;;) {
        bool running = false;
        int watch_fd = -1;
        {
            std::lock_guard lock(mutex_);
            if (stopping_)
                return;
            running = running_;
            watch_fd = watch_fd_;
        }
        const int timeout_ms = running ? static_cast<int>(flush_interval.count()) : -1;
        // A signal or input the tracer has been told of stays pending until
        // it takes it: not looked at again meanwhile, or this would spin.
        const bool watch = running && !attention_.load();
        pollfd fds[3] = {{control_.get(), POLLIN, 0},
                         {watch ? signal_fd_ : -1, POLLIN, 0},
                         {watch ? watch_fd : -1, POLLIN, 0}};
        int n = ::poll(fds, 3, timeout_ms);
        if (n < 0 && errno != EINTR)
            return;
        if ((fds[0].revents & POLLIN) != 0) {
            std::uint64_t count = 0;
            (void)!::read(control_.get(), &count, sizeof count);
        }
        if (!running)
            continue;
        if ((fds[1].revents | fds[2].revents) & (POLLIN | POLLHUP | POLLERR))
            attention_.store(true);
        // Woken again at every tick while the flag stands: a wait the tracer
        // makes for its own reasons meanwhile may have taken the wake.
        if (attention_.load())
            ptrace::waiter::wake();
        // Under the lock: once end_run() has returned, nothing is written here.
        std::lock_guard lock(mutex_);
        if (running_)
            flush_();
    }
}

}  // namespace tdctl::cmd
