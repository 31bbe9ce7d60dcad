#include "cmd/repl.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <poll.h>
#include <string>
#include <unistd.h>

#include <editline/readline.h>

namespace tdctl::cmd {

namespace {

// libedit's callback interface takes a plain function: the REPL state it
// needs lives here for the duration of run_repl().
runner* g_runner = nullptr;
bool g_quit = false;
bool g_prompt_shown = false;
int g_line_no = 0;
command_status g_last = command_status::ok;

const char* prompt = "(tdctl) ";

void before_print()
{
    if (g_prompt_shown) {
        std::fputs("\r\033[K", stdout);
        std::fflush(stdout);
    }
}

void after_print()
{
    if (g_prompt_shown)
        rl_forced_update_display();
}

std::string history_path()
{
    const char* home = std::getenv("HOME");
    return home ? std::string(home) + "/.tdctl_history" : std::string();
}

void on_line(char* line)
{
    if (line == nullptr) {
        g_quit = true;
        std::fputc('\n', stdout);
        return;
    }
    std::string text(line);
    std::free(line);
    if (!text.empty())
        add_history(text.c_str());
    // libedit leaves the terminal half-prepared between lines in callback
    // mode; taking the handler down while the command runs and installing it
    // again afterwards gives a clean prompt and no double echo.
    rl_callback_handler_remove();
    g_prompt_shown = false;
    g_last = g_runner->execute(text, "line " + std::to_string(++g_line_no));
    if (g_last == command_status::quit || g_runner->must_exit()) {
        g_quit = true;
        return;
    }
    rl_callback_handler_install(prompt, on_line);
    g_prompt_shown = true;
}

}  // namespace

command_status run_repl(runner& run, core::session& session, output& out, signal_source& signals)
{
    g_runner = &run;
    g_quit = false;
    out.set_prompt_hooks(before_print, after_print);
    std::string hist = history_path();
    if (!hist.empty())
        read_history(hist.c_str());
    rl_callback_handler_install(prompt, on_line);
    g_prompt_shown = true;

    while (!g_quit) {
        pollfd fds[3] = {{STDIN_FILENO, POLLIN, 0}, {signals.fd(), POLLIN, 0}, {-1, POLLIN, 0}};
        if (run.has_target())
            fds[2].fd = session.wait_fd();
        // Stops already collected are serviced without sleeping.
        ::poll(fds, 3, run.has_target() && session.has_pending() ? 0 : -1);
        if (int sig = signals.take(); sig != 0) {
            if (sig == SIGINT) {
                // Ctrl-C at the prompt clears the line, as in a shell.
                std::fputs("^C\n", stdout);
                rl_replace_line("", 0);
                rl_forced_update_display();
                continue;
            }
            break;
        }
        if (fds[2].fd >= 0)
            run.poll_target();
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR))
            rl_callback_read_char();
    }
    if (g_prompt_shown)
        rl_callback_handler_remove();
    g_prompt_shown = false;
    out.set_prompt_hooks(nullptr, nullptr);
    if (!hist.empty())
        write_history(hist.c_str());
    return g_last == command_status::quit ? command_status::ok : g_last;
}

}  // namespace tdctl::cmd
