// A decoded wait status (wait(2), as ptrace/waiter takes it), as a value.
// Built only by decode(); tests build statuses with the for_* factories.
#pragma once

#include <string>

namespace tdctl::ptrace {

enum class wait_kind {
    exited,         ///< WIFEXITED: exit_code()
    killed,         ///< WIFSIGNALED: signal()
    signal_stop,    ///< signal-delivery-stop: signal() is the signal
    group_stop,     ///< PTRACE_EVENT_STOP with a stopping signal (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU)
    event_stop,     ///< PTRACE_EVENT_STOP with SIGTRAP: PTRACE_INTERRUPT, or a new clone's first stop
    clone_event,    ///< PTRACE_EVENT_CLONE
    fork_event,     ///< PTRACE_EVENT_FORK
    vfork_event,    ///< PTRACE_EVENT_VFORK
    vfork_done,     ///< PTRACE_EVENT_VFORK_DONE
    exec_event,     ///< PTRACE_EVENT_EXEC
    exit_event,     ///< PTRACE_EVENT_EXIT: the task is exiting but still readable
    syscall_stop,   ///< SIGTRAP|0x80 (not requested by tdctl, decoded for completeness)
    other,
};

class wait_status {
public:
    /// Decodes a status from wait(2) of a task traced with PTRACE_SEIZE.
    static wait_status decode(int raw);

    static wait_status for_exit(int code);
    static wait_status for_kill(int sig);
    static wait_status for_signal_stop(int sig);
    static wait_status for_ptrace_event(int event, int sig);

    wait_kind kind() const { return kind_; }
    int raw() const { return raw_; }
    int exit_code() const { return value_; }   ///< for exited
    int signal() const { return value_; }      ///< for killed and every stop: WSTOPSIG / WTERMSIG
    bool is_stop() const;
    /// Exited or killed: the task is gone and this was its last status.
    bool has_ended() const { return kind_ == wait_kind::exited || kind_ == wait_kind::killed; }
    /// The signal a restart from this stop delivers: the signal of a
    /// signal-delivery-stop, 0 for every other kind.
    int signal_to_deliver() const { return kind_ == wait_kind::signal_stop ? value_ : 0; }

    /// "exited 0", "killed SIGKILL", "signal-stop SIGUSR1", "clone-event", ...
    std::string to_string() const;

private:
    wait_status(wait_kind k, int raw, int value) : kind_(k), raw_(raw), value_(value) {}
    wait_kind kind_;
    int raw_;
    int value_;
};

/// "SIGSEGV" for 11; "SIG<n>" (or SIGRTMIN+n) when unnamed.
std::string signal_name(int sig);

}  // namespace tdctl::ptrace
