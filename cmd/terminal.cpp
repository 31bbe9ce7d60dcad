#include "cmd/terminal.hpp"

#include <csignal>
#include <termios.h>
#include <unistd.h>

namespace tdctl::cmd {

bool owns_terminal(int fd)
{
    if (::isatty(fd) == 0)
        return true;
    const pid_t foreground = ::tcgetpgrp(fd);
    // ENOTTY: a terminal, but not our controlling one; reading it never stops us.
    if (foreground < 0)
        return true;
    return foreground == ::getpgrp();
}

void ignore_terminal_stops()
{
    std::signal(SIGTTOU, SIG_IGN);
    std::signal(SIGTTIN, SIG_IGN);
}

}  // namespace tdctl::cmd
