#include "ptrace/wait_status.hpp"

#include <csignal>
#include <cstring>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <fmt/format.h>

namespace tdctl::ptrace {

namespace {
bool is_stopping_signal(int sig)
{
    return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}
}  // namespace

wait_status wait_status::decode(int raw)
{
    if (WIFEXITED(raw))
        return {wait_kind::exited, raw, WEXITSTATUS(raw)};
    if (WIFSIGNALED(raw))
        return {wait_kind::killed, raw, WTERMSIG(raw)};
    if (!WIFSTOPPED(raw))
        return {wait_kind::other, raw, 0};

    int sig = WSTOPSIG(raw);
    int event = (raw >> 16) & 0xff;
    switch (event) {
    case 0:
        if (sig == (SIGTRAP | 0x80))
            return {wait_kind::syscall_stop, raw, SIGTRAP};
        return {wait_kind::signal_stop, raw, sig};
    case PTRACE_EVENT_STOP:
        return {is_stopping_signal(sig) ? wait_kind::group_stop : wait_kind::event_stop, raw, sig};
    case PTRACE_EVENT_CLONE: return {wait_kind::clone_event, raw, sig};
    case PTRACE_EVENT_FORK: return {wait_kind::fork_event, raw, sig};
    case PTRACE_EVENT_VFORK: return {wait_kind::vfork_event, raw, sig};
    case PTRACE_EVENT_VFORK_DONE: return {wait_kind::vfork_done, raw, sig};
    case PTRACE_EVENT_EXEC: return {wait_kind::exec_event, raw, sig};
    case PTRACE_EVENT_EXIT: return {wait_kind::exit_event, raw, sig};
    default: return {wait_kind::other, raw, sig};
    }
}

wait_status wait_status::for_exit(int code) { return decode((code & 0xff) << 8); }
wait_status wait_status::for_kill(int sig) { return decode(sig & 0x7f); }
wait_status wait_status::for_signal_stop(int sig) { return decode(((sig & 0xff) << 8) | 0x7f); }
wait_status wait_status::for_ptrace_event(int event, int sig)
{
    return decode((event << 16) | ((sig & 0xff) << 8) | 0x7f);
}

bool wait_status::is_stop() const
{
    return kind_ != wait_kind::exited && kind_ != wait_kind::killed && kind_ != wait_kind::other;
}

std::string signal_name(int sig)
{
    if (sig >= SIGRTMIN && sig <= SIGRTMAX)
        return sig == SIGRTMIN ? "SIGRTMIN" : fmt::format("SIGRTMIN+{}", sig - SIGRTMIN);
    if (const char* abbrev = sigabbrev_np(sig))
        return std::string("SIG") + abbrev;
    return fmt::format("SIG{}", sig);
}

std::string wait_status::to_string() const
{
    switch (kind_) {
    case wait_kind::exited: return fmt::format("exited {}", value_);
    case wait_kind::killed: return fmt::format("killed {}", signal_name(value_));
    case wait_kind::signal_stop: return fmt::format("signal-stop {}", signal_name(value_));
    case wait_kind::group_stop: return fmt::format("group-stop {}", signal_name(value_));
    case wait_kind::event_stop: return "event-stop";
    case wait_kind::clone_event: return "clone-event";
    case wait_kind::fork_event: return "fork-event";
    case wait_kind::vfork_event: return "vfork-event";
    case wait_kind::vfork_done: return "vfork-done";
    case wait_kind::exec_event: return "exec-event";
    case wait_kind::exit_event: return "exit-event";
    case wait_kind::syscall_stop: return "syscall-stop";
    case wait_kind::other: break;
    }
    return fmt::format("status {:#x}", raw_);
}

}  // namespace tdctl::ptrace
