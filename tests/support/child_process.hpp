// A child process owned by a test: fixture targets and one-shot `tdctl` runs.
// Every wait is bounded, and the owner kills and reaps the child whatever the
// test's assertions did.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/types.h>

#include "base/unique_fd.hpp"

namespace tdctl::test {

using std::chrono::milliseconds;

/// How a child ended, decoded from a waitpid() status.
class exit_status {
public:
    static exit_status from_wait(int raw) { return exit_status{raw, true}; }
    /// waitpid() said ECHILD: someone else (a tracer's waitpid(-1), say)
    /// collected the child, so its status is unknown.
    static exit_status reaped_elsewhere() { return exit_status{0, false}; }

    bool is_known() const { return known_; }
    bool is_exited() const;
    /// The exit code, or -1 when the child did not exit normally.
    int exit_code() const;
    bool is_signaled() const;
    /// The signal that killed the child, or 0.
    int term_signal() const;
    bool is_success() const { return is_exited() && exit_code() == 0; }
    int raw() const { return raw_; }

    /// "exited 0", "killed by signal 9 (SIGKILL)", "reaped elsewhere (status unknown)".
    std::string describe() const;

    friend bool operator==(const exit_status&, const exit_status&) = default;

private:
    exit_status(int raw, bool known) : raw_(raw), known_(known) {}

    int raw_ = 0;
    bool known_ = true;
};

struct spawn_options {
    /// Variables added to the inherited environment (replacing any of the same name).
    std::vector<std::pair<std::string, std::string>> env{};
    /// When set, stdout goes to this file (created or truncated) instead of a pipe.
    std::optional<std::string> stdout_file{};
    /// Put the child in a process group of its own, so that killing it also
    /// kills whatever it started (a target launched by tdctl, say).
    bool own_process_group = true;
    /// SIGKILL the child if the thread that spawned it dies (the test was
    /// killed by a CTest timeout, say), so no fixture outlives its test.
    /// Spawn from a thread that lives as long as the child when this is on.
    bool kill_on_parent_death = true;
};

class child_process {
public:
    /// Starts argv[0] (a path, or a name looked up in PATH) with stdin, stdout
    /// and stderr connected to pipes. Signal dispositions and the signal mask
    /// are reset to defaults in the child. Throws tdctl::error (domain os,
    /// code = execve's errno) when the program cannot be executed.
    static child_process spawn(const std::vector<std::string>& argv, const spawn_options& options = {});

    child_process(child_process&& other) noexcept;
    child_process& operator=(child_process&& other) noexcept;
    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;

    /// SIGKILLs the child (and its process group) unless it was reaped, then
    /// reaps it. Never blocks for more than a few seconds.
    ~child_process();

    pid_t pid() const { return pid_; }

    /// Writes all of text to the child's stdin, waiting at most 5 s for room in
    /// the pipe. Returns false when the child no longer reads it (EPIPE).
    bool write_stdin(std::string_view text);
    void close_stdin();

    /// The next line of stdout without its newline; the rest of the output as
    /// a last line if it ends without one. nullopt when nothing came within
    /// timeout or stdout reached end of file.
    std::optional<std::string> read_line(milliseconds timeout);
    /// As read_line, but a missing line throws std::runtime_error naming the
    /// child and showing its stderr.
    std::string require_line(milliseconds timeout);
    /// Writes line plus a newline, then returns the answer line (require_line).
    std::string ask(std::string_view line, milliseconds timeout = milliseconds{5000});

    /// Waits at most timeout for the child to exit, draining its output pipes
    /// meanwhile. nullopt if it is still running. Consumes only exit reports
    /// of this child: ptrace stops a tracer in this process waits for are left
    /// alone, and other children are never reaped.
    std::optional<exit_status> wait_exit(milliseconds timeout);
    /// As wait_exit, but a child still running throws std::runtime_error.
    exit_status require_exit(milliseconds timeout);

    /// The status once the child was reaped.
    std::optional<exit_status> status() const { return status_; }

    /// kill(pid, sig); false when the child is gone or was reaped.
    bool send_signal(int sig);

    /// Everything read from stdout so far (lines returned by read_line
    /// included), after reading what the pipe holds now. Complete once the
    /// child has exited (unless something it started still writes).
    const std::string& stdout_text();
    const std::string& stderr_text();

    /// "steer (pid 1234)", for messages.
    std::string describe() const;

    /// What the destructor does, available earlier.
    void kill_and_reap();

private:
    child_process() = default;

    bool try_reap();
    void drain(milliseconds timeout);
    void read_available(unique_fd& fd, std::string& into);
    void release();

    pid_t pid_ = -1;
    std::string name_;
    bool own_process_group_ = false;
    std::optional<exit_status> status_;
    unique_fd stdin_;
    unique_fd stdout_;
    unique_fd stderr_;
    std::string out_;
    std::size_t out_pos_ = 0;
    std::string err_;
};

struct run_options {
    /// Written to the command's stdin, which is then closed (it is closed at
    /// once when empty, so a REPL sees end of file).
    std::string stdin_text;
    std::vector<std::pair<std::string, std::string>> env{};
};

struct command_result {
    exit_status status;
    std::string out;
    std::string err;
    std::string command;

    /// Command, status and both outputs (trimmed), for assertion messages.
    std::string describe() const;
};

/// Runs argv to completion and returns its status and output. Throws
/// tdctl::error if it cannot be executed, and std::runtime_error (with the
/// output so far) if it does not finish within timeout; it is killed then.
command_result run_command(const std::vector<std::string>& argv, milliseconds timeout, const run_options& options = {});

/// argv joined with spaces, each argument quoted when it needs it.
std::string shell_quote(const std::vector<std::string>& argv);

}  // namespace tdctl::test
