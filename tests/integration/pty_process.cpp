#include "tests/integration/pty_process.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

extern char** environ;

namespace tdctl::itest {

namespace {

std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& additions)
{
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        std::string_view entry(*e);
        bool replaced = false;
        for (const auto& [name, value] : additions)
            replaced = replaced || (entry.starts_with(name) && entry.size() > name.size() && entry[name.size()] == '=');
        if (!replaced)
            env.emplace_back(entry);
    }
    for (const auto& [name, value] : additions)
        env.push_back(name + "=" + value);
    return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings)
{
    std::vector<char*> out;
    for (auto& s : strings)
        out.push_back(s.data());
    out.push_back(nullptr);
    return out;
}

}  // namespace

std::string escape_bytes(std::string_view text)
{
    std::string out;
    for (unsigned char c : text) {
        if (c == '\n')
            out += "\\n\n";
        else if (c == '\r')
            out += "\\r";
        else if (c < 0x20 || c > 0x7e)
            out += fmt::format("\\x{:02x}", c);
        else
            out += static_cast<char>(c);
    }
    return out;
}

pty_process::pty_process(const std::vector<std::string>& argv, const pty_options& options)
{
    if (argv.empty())
        throw std::invalid_argument("pty_process: empty argv");
    // Everything the child needs is built before fork (the test may have threads).
    std::vector<std::string> args = argv;
    std::vector<std::string> env = environment_with(options.env);
    std::vector<char*> c_args = c_strings(args);
    std::vector<char*> c_env = c_strings(env);
    winsize size{};
    size.ws_row = options.rows;
    size.ws_col = options.columns;
    const pid_t parent = ::getpid();

    pid_ = ::forkpty(&master_, nullptr, nullptr, &size);
    if (pid_ < 0)
        throw std::runtime_error(fmt::format("forkpty: {}", std::strerror(errno)));
    if (pid_ == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent)
            ::_exit(127);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        struct sigaction dfl{};
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; ++sig)
            ::sigaction(sig, &dfl, nullptr);
        ::execve(c_args[0], c_args.data(), c_env.data());
        ::_exit(127);
    }
    ::fcntl(master_, F_SETFD, FD_CLOEXEC);
    ::fcntl(master_, F_SETFL, ::fcntl(master_, F_GETFL) | O_NONBLOCK);
}

pty_process::~pty_process()
{
    if (pid_ > 0 && !reaped_) {
        // The session leader's group, and whatever it started in groups of
        // its own gets SIGHUP when the terminal closes below.
        ::kill(-pid_, SIGKILL);
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0)
        ::close(master_);
}

void pty_process::read_some(int timeout_ms)
{
    if (closed_)
        return;
    pollfd p{master_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0)
        return;
    for (;;) {
        char buf[8192];
        ssize_t n = ::read(master_, buf, sizeof buf);
        if (n > 0) {
            screen_.append(buf, static_cast<std::size_t>(n));
            continue;
        }
        // EIO: every slave descriptor is closed (the session ended).
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            closed_ = true;
        return;
    }
}

void pty_process::drain() { read_some(0); }

bool pty_process::wait_for(std::string_view text, milliseconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (auto at = screen_.find(text, consumed_); at != std::string::npos) {
            consumed_ = at + text.size();
            return true;
        }
        auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || closed_)
            return false;
        read_some(static_cast<int>(left.count()));
    }
}

bool pty_process::type(std::string_view keys, milliseconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!keys.empty()) {
        ssize_t n = ::write(master_, keys.data(), keys.size());
        if (n > 0) {
            keys.remove_prefix(static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        if (std::chrono::steady_clock::now() >= deadline)
            return false;
        // The input queue is full: let the reader (and its echo) move on.
        pollfd p[1] = {{master_, POLLIN | POLLOUT, 0}};
        if (::poll(p, 1, 50) > 0 && (p[0].revents & POLLIN))
            read_some(0);
    }
    return true;
}

std::optional<int> pty_process::wait_exit(milliseconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        int status = 0;
        if (!reaped_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {
            reaped_ = true;
            drain();
            return status;
        }
        if (std::chrono::steady_clock::now() >= deadline)
            return std::nullopt;
        read_some(closed_ ? 0 : 20);
        if (closed_)
            ::usleep(20'000);
    }
}

void pty_process::hang_up()
{
    if (master_ >= 0)
        ::close(master_);
    master_ = -1;
    closed_ = true;
}

termios pty_process::modes() const
{
    termios t{};
    if (::tcgetattr(master_, &t) != 0)
        throw std::runtime_error(fmt::format("tcgetattr on the pty: {}", std::strerror(errno)));
    return t;
}

std::string pty_process::tail(std::size_t n) const
{
    std::string_view s(screen_);
    if (s.size() > n)
        s.remove_prefix(s.size() - n);
    return escape_bytes(s);
}

}  // namespace tdctl::itest
