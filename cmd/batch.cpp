#include "cmd/batch.hpp"

#include <cerrno>
#include <csignal>
#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/quoting.hpp"
#include "cmd/command_line.hpp"
#include "cmd/commands.hpp"
#include "cmd/terminal.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::cmd {

namespace {

// Blank lines and comments do nothing, so they are not "commands not run".
bool is_command(const std::string& text)
{
    auto first = text.find_first_not_of(" \t\r");
    return first != std::string::npos && text[first] != '#';
}

// `quit` (or `q`, `exit`) with nothing after it.
bool is_quit(const std::string& text)
{
    auto w = split_words(text);
    if (!w || w->size() != 1)
        return false;
    const command_entry* command = find_command(w->front());
    return command != nullptr && command->name == "quit";
}

}  // namespace

batch::batch(runner& run, output& out, bool prompt_follows) : run_(run), out_(out), prompt_follows_(prompt_follows)
{
}

bool batch::run_one(const script_line& line)
{
    auto st = run_.execute(line.text, line.where);
    if (is_command(line.text))
        last_outcome_ = st;
    if (st == command_status::quit) {
        quit_ = true;
        return false;
    }
    // Its error record says what failed; the next line runs (gdb -batch -ex).
    if (st == command_status::failed)
        failed_ = true;
    if (run_.loop().must_exit() || (run_.loop().last_signal() == SIGINT && !prompt_follows_)) {
        end_signal_ = run_.loop().last_signal();
        return false;
    }
    return true;
}

std::string batch::why_ended() const
{
    if (quit_)
        return "quit";
    if (end_signal_ != 0)
        return "tdctl was interrupted";
    return run_.target_exit_status() ? "the target has exited" : "detached from the target";
}

void batch::note_not_run(const std::vector<script_line>& rest, const std::string& why)
{
    std::vector<const script_line*> commands;
    for (const auto& l : rest) {
        if (is_quit(l.text))
            break;
        if (is_command(l.text))
            commands.push_back(&l);
    }
    if (commands.empty())
        return;
    out_.note(fmt::format("{}; {} command{} not run, from `{}` ({})", why, commands.size(),
                          commands.size() == 1 ? "" : "s", word_excerpt(commands.front()->text),
                          commands.front()->where));
}

bool batch::run_lines(const std::vector<script_line>& lines, bool ends_session)
{
    std::size_t last_command = lines.size();
    for (std::size_t i = 0; i < lines.size(); ++i)
        if (is_command(lines[i].text))
            last_command = i;
    const auto rest = [&](std::size_t from) {
        return std::vector<script_line>(lines.begin() + static_cast<std::ptrdiff_t>(from), lines.end());
    };
    for (std::size_t i = 0; i < lines.size(); ++i) {
        run_.set_detach_follows(ends_session && i == last_command);
        run_.set_command_follows(i < last_command);
        run_.loop().poll_target();
        if (!run_.has_target()) {
            // The target is gone or detached; later commands have nothing to act on.
            note_not_run(rest(i), why_ended());
            return false;
        }
        if (!run_one(lines[i])) {
            note_not_run(rest(i + 1), why_ended());
            return false;
        }
    }
    return true;
}

bool batch::run_stdin(signal_source& signals)
{
    std::string pending;
    int line_no = 0;
    bool eof = false;
    for (;;) {
        // Whole lines first; the last one may lack its newline at end of input.
        std::vector<script_line> ready;
        for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
            ready.push_back({pending.substr(0, nl), fmt::format("stdin:{}", ++line_no)});
            pending.erase(0, nl + 1);
        }
        if (eof && !pending.empty()) {
            ready.push_back({pending, fmt::format("stdin:{}", ++line_no)});
            pending.clear();
        }
        if (!ready.empty() && !run_lines(ready))
            return false;
        if (eof)
            return true;
        if (!run_.has_target())
            return false;  // exited or detached: nothing left to act on; the input is not read further

        run_.session().release_lingering();  // no thread stays stopped while input is awaited
        // A terminal is read only while tdctl is in its foreground; from the
        // background it looks again now and then (`fg` sends no signal).
        const bool readable = owns_terminal(STDIN_FILENO);
        run_.loop().wait_for_input(readable ? STDIN_FILENO : -1, readable ? -1 : ptrace::waiter::repoll_ms);
        pollfd fds[1] = {{readable ? STDIN_FILENO : -1, POLLIN, 0}};
        if (::poll(fds, 1, 0) < 0 && errno != EINTR)
            return true;
        if (int sig = signals.take(); sig != 0) {
            end_signal_ = sig;
            return false;
        }
        run_.loop().poll_target();
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[4096];
            ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
            // EIO from a terminal that changed hands after the look above
            // (tdctl went to the background) is not the end of the input.
            const bool no_data_yet =
                n < 0 && (errno == EINTR || errno == EAGAIN || (errno == EIO && !owns_terminal(STDIN_FILENO)));
            if (n > 0)
                pending.append(buf, static_cast<std::size_t>(n));
            else if (!no_data_yet)
                eof = true;
        }
    }
}

}  // namespace tdctl::cmd
