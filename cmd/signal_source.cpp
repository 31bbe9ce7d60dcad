#include "cmd/signal_source.hpp"

#include <cerrno>
#include <csignal>
#include <sys/signalfd.h>
#include <unistd.h>

#include "base/error.hpp"

namespace tdctl::cmd {

signal_source::signal_source()
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGCONT);
    if (int err = pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0)
        throw error::from_errno(err, "blocking SIGINT/SIGTERM/SIGHUP/SIGCONT");
    std::signal(SIGPIPE, SIG_IGN);
    int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        throw error::from_errno(errno, "signalfd");
    fd_.reset(fd);
}

int signal_source::take()
{
    signalfd_siginfo info{};
    while (::read(fd_.get(), &info, sizeof info) == sizeof info) {
        if (info.ssi_signo != SIGCONT)
            return static_cast<int>(info.ssi_signo);
        continued_ = true;
    }
    return 0;
}

bool signal_source::take_continued()
{
    bool was = continued_;
    continued_ = false;
    return was;
}

}  // namespace tdctl::cmd
