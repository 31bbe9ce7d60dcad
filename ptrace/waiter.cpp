#include "ptrace/waiter.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.hpp"
#include "base/log.hpp"

namespace tdctl::ptrace {

namespace {
long long now_ms()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}
}  // namespace

waiter::waiter()
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    if (int err = pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0)
        throw error::from_errno(err, "blocking SIGCHLD");
    int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        throw error::from_errno(errno, "signalfd(SIGCHLD)");
    fd_.reset(fd);
}

void waiter::drain_fd()
{
    signalfd_siginfo info[16];
    while (::read(fd_.get(), info, sizeof info) > 0) {
    }
}

std::optional<std::pair<tid_t, wait_status>> waiter::wait_any(int timeout_ms, int wake_fd)
{
    long long deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    auto reap = [this](std::optional<std::pair<tid_t, wait_status>>& out) {
        for (;;) {
            int status = 0;
            pid_t r = ::waitpid(-1, &status, __WALL | WNOHANG);
            if (r > 0) {
                auto ws = wait_status::decode(status);
                log::debug("wait: task {} {}", r, ws.to_string());
                out = std::pair{tid_t{r}, ws};
                return true;
            }
            if (r == 0)
                return false;
            if (errno == EINTR)
                continue;
            if (errno == ECHILD) {
                drain_fd();   // no child at all: nothing is to come
                return true;  // out stays empty
            }
            throw error::from_errno(errno, "waitpid");
        }
    };
    for (;;) {
        std::optional<std::pair<tid_t, wait_status>> got;
        if (reap(got))
            return got;
        // Nothing to reap: empty the signalfd, then look once more. A status
        // becomes waitable before its SIGCHLD is sent, so one whose signal
        // this drain swallowed is found by the second look; after that the
        // descriptor is readable exactly when a new status may be waiting.
        // It is left readable while statuses remain (a status was returned
        // without draining), so a caller's poll() never sleeps on a status
        // nor spins on nothing.
        drain_fd();
        if (reap(got))
            return got;
        int wait_ms = repoll_ms;
        if (deadline >= 0) {
            long long left = deadline - now_ms();
            if (left <= 0)
                return std::nullopt;
            wait_ms = static_cast<int>(std::min<long long>(left, repoll_ms));
        }
        pollfd p[2] = {{fd_.get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
        int n = ::poll(p, wake_fd >= 0 ? 2 : 1, wait_ms);
        if (n < 0 && errno != EINTR)
            throw error::from_errno(errno, "poll on SIGCHLD");
        if (wake_fd >= 0 && (p[1].revents & POLLIN) != 0)
            return std::nullopt;
    }
}

std::optional<wait_status> waiter::wait_for(tid_t tid)
{
    for (;;) {
        int status = 0;
        pid_t r = ::waitpid(tid.value, &status, __WALL);
        if (r == tid.value) {
            auto ws = wait_status::decode(status);
            log::debug("wait: task {} {}", r, ws.to_string());
            return ws;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == ECHILD)
            return std::nullopt;
        if (r < 0)
            throw error::from_errno(errno, fmt::format("waitpid({})", tid.value));
    }
}

}  // namespace tdctl::ptrace
