#include "cmd/guardian.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.hpp"

namespace tdctl::cmd {

namespace {

int g_guardian_pid = 0;

// Signals a user (or a job runner) sends to end tdctl; SIGCHLD says the
// tracer ended.
sigset_t guardian_signals()
{
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD})
        sigaddset(&set, sig);
    return set;
}

// The status the guardian ends with: the tracer's own.
int exit_code_of(pid_t tracer, int raw)
{
    if (WIFEXITED(raw))
        return WEXITSTATUS(raw);
    int sig = WTERMSIG(raw);
    std::fprintf(stderr,
                 "tdctl: the tracer process %d was killed by signal %d (%s); the target may still hold "
                 "tdctl's breakpoints\n",
                 tracer, sig, strsignal(sig));
    return 128 + sig;
}

[[noreturn]] void guard(pid_t tracer, int signal_fd, bool own_session)
{
    for (;;) {
        pollfd p{signal_fd, POLLIN, 0};
        // SIGCHLD may be late or merged: look at the tracer at least every 200 ms.
        if (::poll(&p, 1, 200) < 0 && errno != EINTR)
            std::_Exit(2);
        signalfd_siginfo info{};
        while (::read(signal_fd, &info, sizeof info) == sizeof info) {
            int sig = static_cast<int>(info.ssi_signo);
            if (sig == SIGCHLD)
                continue;
            // si_code <= 0: sent by a process (kill, sigqueue, tgkill). The
            // terminal's Ctrl-C and Ctrl-\ carry SI_KERNEL and reach a tracer
            // in the same process group by themselves; a hangup goes to the
            // session leader alone, so it is always passed on (a second
            // SIGHUP or SIGTERM ends tdctl no differently than one).
            bool from_process = static_cast<int>(info.ssi_code) <= 0;
            if (from_process || own_session || sig == SIGHUP || sig == SIGTERM)
                ::kill(tracer, sig);
        }
        int raw = 0;
        pid_t r = ::waitpid(tracer, &raw, WNOHANG);
        if (r == tracer)
            std::exit(exit_code_of(tracer, raw));
        if (r < 0 && errno != EINTR)
            std::_Exit(2);
    }
}

}  // namespace

int guardian_pid() { return g_guardian_pid; }

void split_off_tracer(bool own_session)
{
    sigset_t set = guardian_signals(), old;
    if (int err = pthread_sigmask(SIG_BLOCK, &set, &old); err != 0)
        throw error::from_errno(err, "blocking signals in the guardian");
    // Nothing buffered may be written twice.
    std::fflush(nullptr);
    pid_t parent = ::getpid();
    pid_t tracer = ::fork();
    if (tracer < 0)
        throw error::from_errno(errno, "fork");
    if (tracer == 0) {
        g_guardian_pid = parent;
        if (own_session)
            ::setsid();
        // The guardian's death is a hangup; if it died before this line, the
        // hangup is sent here by hand.
        ::prctl(PR_SET_PDEATHSIG, SIGHUP);
        if (::getppid() != parent)
            ::kill(::getpid(), SIGHUP);
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        return;
    }
    int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) {
        ::kill(tracer, SIGKILL);
        throw error::from_errno(errno, "signalfd in the guardian");
    }
    // The guardian holds nothing: no descriptor of the target, no terminal
    // state. It waits, passes signals on, and ends as the tracer did.
    guard(tracer, fd, own_session);
}

}  // namespace tdctl::cmd
