// A forked child that waits in pause() until killed: a live process for the
// ptrace unit tests to seize, read or name. Killed and reaped at scope end.
#pragma once

#include <csignal>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tdctl::test {

struct paused_child {
    pid_t pid = ::fork();  ///< the child's PID; -1 when fork failed
    paused_child()
    {
        if (pid == 0) {
            ::pause();
            ::_exit(0);
        }
    }
    ~paused_child()
    {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, __WALL);
        }
    }
    paused_child(const paused_child&) = delete;
    paused_child& operator=(const paused_child&) = delete;
};

}  // namespace tdctl::test
