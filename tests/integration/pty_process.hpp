// A process on a pseudo-terminal: what a user at a terminal sees and types.
// Every wait is bounded; the owner kills and reaps the process (and its
// process group) whatever the test's assertions did.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/types.h>
#include <termios.h>

namespace tdctl::itest {

using std::chrono::milliseconds;

struct pty_options {
    /// Variables added to the inherited environment (replacing any of the same name).
    std::vector<std::pair<std::string, std::string>> env;
    unsigned short rows = 24;
    unsigned short columns = 80;
};

class pty_process {
public:
    /// Starts argv[0] (an absolute path) as the leader of a new session whose
    /// controlling terminal is a fresh pty; stdin, stdout and stderr are the
    /// pty. Signal dispositions and the signal mask are reset to defaults.
    explicit pty_process(const std::vector<std::string>& argv, const pty_options& options = {});
    ~pty_process();
    pty_process(const pty_process&) = delete;
    pty_process& operator=(const pty_process&) = delete;

    pid_t pid() const { return pid_; }

    /// Reads the terminal until `text` appears after what earlier calls
    /// consumed; false after `timeout` or when the terminal is closed.
    bool wait_for(std::string_view text, milliseconds timeout);

    /// Types `keys`, reading the terminal meanwhile so that a long input never
    /// deadlocks against the echo. False when not everything could be written
    /// within `timeout`.
    bool type(std::string_view keys, milliseconds timeout = milliseconds{10000});

    /// The exit status (raw waitpid status), waiting at most `timeout` and
    /// draining the terminal meanwhile; nullopt while it still runs.
    std::optional<int> wait_exit(milliseconds timeout);

    /// Reads what the terminal holds now, without waiting.
    void drain();
    /// Every slave side of the terminal is closed (the session's processes are gone).
    bool is_closed() const { return closed_; }

    /// Closes the terminal's master side, as when a terminal window is
    /// closed: the session gets SIGHUP and the terminal reads and writes fail.
    void hang_up();

    /// The terminal's settings as the line discipline holds them now.
    termios modes() const;

    /// Everything the terminal showed so far.
    const std::string& screen() const { return screen_; }
    /// The last `n` bytes of the screen, control characters escaped, for messages.
    std::string tail(std::size_t n = 2000) const;

private:
    void read_some(int timeout_ms);

    int master_ = -1;
    pid_t pid_ = -1;
    bool reaped_ = false;
    bool closed_ = false;
    std::string screen_;
    std::size_t consumed_ = 0;
};

/// `text` with control characters and bytes above 0x7e written as \xNN (and
/// \r, \n kept as escapes), so that a screen can go into a message.
std::string escape_bytes(std::string_view text);

}  // namespace tdctl::itest
