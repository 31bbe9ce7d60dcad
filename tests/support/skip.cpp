#include "tests/support/skip.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "tests/support/proc.hpp"

namespace tdctl::test {

void skip_test(std::string_view reason)
{
    std::fflush(stdout);
    std::fprintf(stderr, "SKIPPED: %.*s\n", static_cast<int>(reason.size()), reason.data());
    std::fflush(stderr);
    std::exit(skip_exit_code);
}

namespace {

std::optional<std::string> probe_ptrace()
{
    if (auto scope = read_text_file("/proc/sys/kernel/yama/ptrace_scope"); scope && scope->starts_with("3"))
        return "Yama ptrace_scope is 3: ptrace is disabled on this machine";

    pid_t child = ::fork();
    if (child < 0)
        return fmt::format("fork failed: {}", std::strerror(errno));
    if (child == 0) {
        for (;;)
            ::pause();
    }
    std::optional<std::string> reason;
    if (::ptrace(PTRACE_SEIZE, child, 0, 0) != 0) {
        int err = errno;
        reason = fmt::format("PTRACE_SEIZE of a child fails: {}{}", std::strerror(err),
                             err == EPERM ? " (a seccomp filter or missing CAP_SYS_PTRACE in this container?)" : "");
    }
    ::kill(child, SIGKILL);
    int status = 0;
    while (::waitpid(child, &status, __WALL) < 0 && errno == EINTR) {
    }
    return reason;
}

}  // namespace

std::optional<std::string> ptrace_unavailable_reason()
{
    static std::once_flag once;
    static std::optional<std::string> reason;
    std::call_once(once, [] { reason = probe_ptrace(); });
    return reason;
}

void require_ptrace()
{
    if (auto reason = ptrace_unavailable_reason())
        skip_test(*reason);
}

}  // namespace tdctl::test
