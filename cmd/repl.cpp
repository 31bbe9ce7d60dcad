#include "cmd/repl.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <poll.h>
#include <string>
#include <string_view>
#include <vector>
#include <unistd.h>

#include "cmd/completion.hpp"
#include "cmd/line_editor.hpp"
#include "cmd/terminal.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::cmd {

namespace {

const char* const prompt_text = "(tdctl) ";

/// How often tdctl in the background looks whether it is in the foreground
/// again: a shell's `fg` sends no signal to a job that is running.
constexpr int foreground_check_ms = 200;

/// After a hangup, how long the SIGHUP that goes with it may take to arrive.
constexpr int hangup_signal_ms = 100;

// The output's prompt hooks are plain functions: they reach the line editor
// of the running prompt through this.
line_editor* g_editor = nullptr;

void before_print()
{
    if (g_editor != nullptr)
        g_editor->before_output();
}

void after_print()
{
    if (g_editor != nullptr)
        g_editor->after_output();
}

std::string history_path()
{
    const char* home = std::getenv("HOME");
    return home ? std::string(home) + "/.tdctl_history" : std::string();
}

class repl {
public:
    repl(runner& run, output& out, signal_source& signals) : run_(run), out_(out), signals_(signals) {}

    command_status run();

private:
    enum class event { none, key, interrupt, continued };

    /// No signal that ends tdctl. The prompt outlives a target: `attach` or
    /// `run` starts another.
    bool going_on() const { return !run_.loop().must_exit(); }
    /// Once per target that ends (detached, killed, exited): what the prompt can do now.
    void note_target_gone();
    /// The target's TIDs now, for completion (/proc/PID/task); none without a target.
    std::vector<pid_t> target_tids();
    /// One wait on the terminal (when `read_terminal`), the signalfd and the
    /// target; services the target and takes a signal that came.
    event wait_once(bool read_terminal, int timeout_ms);
    /// The terminal has hung up (its window closed, the connection lost).
    static bool terminal_hung_up();
    /// Gives the SIGHUP that comes with a hangup time to arrive: it, not the
    /// end of input, decides how tdctl ends.
    void wait_for_hangup_signal();
    /// Until tdctl owns the terminal, servicing the target; false when the
    /// session ended meanwhile.
    bool wait_for_terminal();
    /// The line editor's wait for a key.
    line_editor::wake wait_for_key();

    runner& run_;
    output& out_;
    signal_source& signals_;
    bool owned_ = true;  ///< tdctl owned the terminal when it last looked
    bool noted_background_ = false;
    bool had_target_ = true;  ///< a target to act on when the prompt last looked
};

std::vector<pid_t> repl::target_tids()
{
    std::vector<pid_t> tids;
    if (run_.has_target())
        for (tid_t t : procfs::list_tasks(run_.session().target().pid()))
            tids.push_back(t.value);
    return tids;
}

void repl::note_target_gone()
{
    const bool has = run_.has_target();
    if (had_target_ && !has)
        out_.note("no target now: `attach PID` or `run PROG [ARGS]` starts another session, `quit` leaves");
    had_target_ = has;
}

repl::event repl::wait_once(bool read_terminal, int timeout_ms)
{
    // The target runs, its stops served, until a key, a signal or the time.
    run_.loop().wait_for_input(read_terminal ? STDIN_FILENO : -1, timeout_ms);
    pollfd fds[2] = {{read_terminal ? STDIN_FILENO : -1, POLLIN, 0}, {signals_.fd(), POLLIN, 0}};
    ::poll(fds, 2, 0);
    if (fds[0].revents & POLLHUP)
        wait_for_hangup_signal();
    int sig = signals_.take();
    if (sig != 0 && sig != SIGINT)
        run_.loop().take_signal(sig);
    run_.loop().poll_target();
    note_target_gone();
    if (signals_.take_continued())
        return event::continued;
    if (sig == SIGINT)
        return event::interrupt;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR))
        return event::key;
    return event::none;
}

bool repl::terminal_hung_up()
{
    pollfd tty{STDIN_FILENO, 0, 0};
    return ::poll(&tty, 1, 0) == 1 && (tty.revents & POLLHUP) != 0;
}

void repl::wait_for_hangup_signal()
{
    pollfd sig{signals_.fd(), POLLIN, 0};
    ::poll(&sig, 1, hangup_signal_ms);
}

bool repl::wait_for_terminal()
{
    while (going_on()) {
        if (owns_terminal(STDIN_FILENO))
            return true;
        if (!noted_background_) {
            out_.note("tdctl is in the background: the prompt comes when it is brought to the foreground (fg); "
                      "the target runs meanwhile");
            noted_background_ = true;
        }
        // A Ctrl-C here was typed for the foreground job, not for tdctl.
        wait_once(false, foreground_check_ms);
    }
    return false;
}

line_editor::wake repl::wait_for_key()
{
    for (;;) {
        if (!going_on())
            return line_editor::wake::end;
        const bool owned = owns_terminal(STDIN_FILENO);
        if (owned && !owned_) {
            owned_ = true;
            return line_editor::wake::redraw;  // back in the foreground
        }
        owned_ = owned;
        switch (wait_once(owned, owned ? -1 : foreground_check_ms)) {
        case event::key:
            return line_editor::wake::input;
        case event::interrupt:
            if (owned_)
                return line_editor::wake::interrupt;
            break;
        case event::continued:
            // After a stop (Ctrl-Z, then fg or bg): the shell had the terminal.
            owned_ = owns_terminal(STDIN_FILENO);
            if (owned_ && going_on())
                return line_editor::wake::redraw;
            break;
        case event::none:
            break;
        }
    }
}

command_status repl::run()
{
    std::optional<line_editor> editor;
    command_status last = command_status::ok;
    int line_no = 0;
    while (going_on()) {
        // libedit sets the terminal's modes as it starts and as each line
        // begins: only while the terminal is tdctl's (a command may have been
        // stopped with Ctrl-Z and sent to the background).
        if (!wait_for_terminal())
            break;
        owned_ = true;
        if (!editor) {
            editor.emplace(prompt_text, history_path(), [this] { return wait_for_key(); },
                           [this](std::string_view typed) { return complete_line(typed, target_tids()); });
            g_editor = &*editor;
            out_.set_prompt_hooks(before_print, after_print);
        }
        auto line = editor->read_line();
        if (!line) {
            // libedit may see a hangup first (setting the terminal's modes
            // fails) and end the line without asking for a key.
            if (going_on() && terminal_hung_up()) {
                wait_for_hangup_signal();
                if (int sig = signals_.take(); sig != 0 && sig != SIGINT)
                    run_.loop().take_signal(sig);
            }
            // End of input (Ctrl-D), a signal, the target gone: what follows
            // (and the shell's prompt) goes below the prompt left on the screen.
            if (owns_terminal(STDIN_FILENO)) {
                std::fputc('\n', stdout);
                std::fflush(stdout);
            }
            break;
        }
        last = run_.execute(*line, "line " + std::to_string(++line_no));
        if (last == command_status::quit)
            break;
        note_target_gone();
    }
    out_.set_prompt_hooks(nullptr, nullptr);
    g_editor = nullptr;
    editor.reset();
    return last == command_status::quit ? command_status::ok : last;
}

}  // namespace

command_status run_repl(runner& run, output& out, signal_source& signals)
{
    return repl(run, out, signals).run();
}

}  // namespace tdctl::cmd
