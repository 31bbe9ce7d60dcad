#include "tests/support/child_process.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "tests/support/proc.hpp"

extern char** environ;

namespace tdctl::test {

namespace {

using clock = std::chrono::steady_clock;

constexpr milliseconds stdin_write_timeout{5000};
constexpr milliseconds kill_reap_timeout{10000};

std::string trimmed(std::string_view s)
{
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
        s.remove_suffix(1);
    return std::string(s);
}

milliseconds remaining(clock::time_point deadline)
{
    auto left = std::chrono::ceil<milliseconds>(deadline - clock::now());
    return std::max(left, milliseconds{0});
}

/// Resolves a name without '/' through PATH, as execvp would.
std::string resolve_program(const std::string& name)
{
    if (name.find('/') != std::string::npos)
        return name;
    const char* path = std::getenv("PATH");
    std::string_view dirs = path ? path : "/usr/bin:/bin";
    while (!dirs.empty()) {
        auto colon = dirs.find(':');
        std::string_view dir = dirs.substr(0, colon);
        std::string candidate = std::string(dir.empty() ? "." : dir) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0)
            return candidate;
        if (colon == std::string_view::npos)
            break;
        dirs.remove_prefix(colon + 1);
    }
    return name;
}

std::vector<std::string> build_environment(const std::vector<std::pair<std::string, std::string>>& additions)
{
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
        std::string_view entry(*e);
        std::string_view name = entry.substr(0, entry.find('='));
        bool replaced = std::any_of(additions.begin(), additions.end(),
                                    [&](const auto& kv) { return kv.first == name; });
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
    out.reserve(strings.size() + 1);
    for (auto& s : strings)
        out.push_back(s.data());
    out.push_back(nullptr);
    return out;
}

std::array<unique_fd, 2> make_pipe()
{
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw error::from_errno(errno, "pipe2");
    return {unique_fd(fds[0]), unique_fd(fds[1])};
}

void set_nonblocking(const unique_fd& fd)
{
    int flags = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
}

/// In the forked child: ships errno to the parent over the close-on-exec pipe.
[[noreturn]] void report_exec_failure(int error_fd, int err)
{
    [[maybe_unused]] auto n = ::write(error_fd, &err, sizeof err);
    ::_exit(127);
}

/// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void exec_child(const char* program, char* const* argv, char* const* envp, int stdin_fd, int stdout_fd,
                             int stderr_fd, int error_fd, const spawn_options& options, pid_t parent)
{
    if (options.own_process_group && ::setpgid(0, 0) != 0)
        report_exec_failure(error_fd, errno);
    if (options.kill_on_parent_death) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent)  // the parent died before prctl took effect
            ::_exit(127);
    }
    // The test process may block signals (a signalfd for SIGCHLD) or ignore
    // SIGPIPE; a fixture must start with the defaults like from a shell.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig)
        ::sigaction(sig, &dfl, nullptr);

    if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0)
        report_exec_failure(error_fd, errno);
    // Descriptors the test opened without O_CLOEXEC must not leak into targets.
    ::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
    ::execve(program, argv, envp);
    report_exec_failure(error_fd, errno);
}

}  // namespace

// ---------------------------------------------------------------- exit_status

bool exit_status::is_exited() const { return known_ && WIFEXITED(raw_); }
int exit_status::exit_code() const { return is_exited() ? WEXITSTATUS(raw_) : -1; }
bool exit_status::is_signaled() const { return known_ && WIFSIGNALED(raw_); }
int exit_status::term_signal() const { return is_signaled() ? WTERMSIG(raw_) : 0; }

std::string exit_status::describe() const
{
    if (!known_)
        return "reaped elsewhere (status unknown)";
    if (is_exited())
        return fmt::format("exited {}", exit_code());
    if (is_signaled()) {
        const char* abbrev = ::sigabbrev_np(term_signal());
        return fmt::format("killed by signal {} (SIG{}){}", term_signal(), abbrev ? abbrev : "?",
                           WCOREDUMP(raw_) ? ", core dumped" : "");
    }
    return fmt::format("wait status {:#x}", raw_);
}

// -------------------------------------------------------------- child_process

child_process child_process::spawn(const std::vector<std::string>& argv, const spawn_options& options)
{
    if (argv.empty())
        throw std::invalid_argument("child_process::spawn: empty argv");

    // Everything the child needs is prepared before fork: after it, only
    // async-signal-safe calls are allowed (the test process has threads).
    std::string program = resolve_program(argv[0]);
    std::vector<std::string> args = argv;
    std::vector<std::string> env = build_environment(options.env);
    std::vector<char*> c_args = c_strings(args);
    std::vector<char*> c_env = c_strings(env);

    auto in = make_pipe();
    auto err = make_pipe();
    auto exec_error = make_pipe();
    std::array<unique_fd, 2> out;
    if (options.stdout_file) {
        int fd = ::open(options.stdout_file->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            throw error::from_errno(errno, "open " + *options.stdout_file);
        out[1] = unique_fd(fd);
    } else {
        out = make_pipe();
    }

    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0)
        throw error::from_errno(errno, "fork");
    if (pid == 0)
        exec_child(program.c_str(), c_args.data(), c_env.data(), in[0].get(), out[1].get(), err[1].get(),
                   exec_error[1].get(), options, parent);

    // Keep the group id valid from here on even if the child has not run yet.
    if (options.own_process_group)
        ::setpgid(pid, pid);

    child_process child;
    child.pid_ = pid;
    child.name_ = argv[0].substr(argv[0].rfind('/') + 1);
    child.own_process_group_ = options.own_process_group;
    child.stdin_ = std::move(in[1]);
    child.stdout_ = std::move(out[0]);
    child.stderr_ = std::move(err[0]);
    in[0].reset();
    out[1].reset();
    err[1].reset();
    exec_error[1].reset();

    // End of file: execve succeeded (the close-on-exec pipe closed with it).
    int exec_errno = 0;
    ssize_t n;
    do {
        n = ::read(exec_error[0].get(), &exec_errno, sizeof exec_errno);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof exec_errno)) {
        child.kill_and_reap();
        throw error::from_errno(exec_errno, "cannot execute " + program);
    }

    if (child.stdout_.is_open())
        set_nonblocking(child.stdout_);
    set_nonblocking(child.stderr_);
    return child;
}

child_process::child_process(child_process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      name_(std::move(other.name_)),
      own_process_group_(other.own_process_group_),
      status_(other.status_),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)),
      out_(std::move(other.out_)),
      out_pos_(other.out_pos_),
      err_(std::move(other.err_))
{
}

child_process& child_process::operator=(child_process&& other) noexcept
{
    if (this != &other) {
        kill_and_reap();
        pid_ = std::exchange(other.pid_, -1);
        name_ = std::move(other.name_);
        own_process_group_ = other.own_process_group_;
        status_ = other.status_;
        stdin_ = std::move(other.stdin_);
        stdout_ = std::move(other.stdout_);
        stderr_ = std::move(other.stderr_);
        out_ = std::move(other.out_);
        out_pos_ = other.out_pos_;
        err_ = std::move(other.err_);
    }
    return *this;
}

child_process::~child_process() { kill_and_reap(); }

std::string child_process::describe() const { return fmt::format("{} (pid {})", name_, pid_); }

bool child_process::try_reap()
{
    if (status_)
        return true;
    // Peek first (WNOWAIT): if this process traces the child, waitid also
    // reports ptrace stops, and those belong to the tracer's own wait loop.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT | __WALL) != 0) {
        if (errno == EINTR)
            return false;
        if (errno == ECHILD) {
            status_ = exit_status::reaped_elsewhere();
            return true;
        }
        throw error::from_errno(errno, "waitid " + describe());
    }
    if (info.si_pid == 0)
        return false;
    if (info.si_code != CLD_EXITED && info.si_code != CLD_KILLED && info.si_code != CLD_DUMPED)
        return false;
    int raw = 0;
    pid_t r = ::waitpid(pid_, &raw, WNOHANG | __WALL);
    if (r == pid_) {
        status_ = exit_status::from_wait(raw);
        return true;
    }
    if (r < 0 && errno == ECHILD) {
        status_ = exit_status::reaped_elsewhere();
        return true;
    }
    return false;
}

void child_process::read_available(unique_fd& fd, std::string& into)
{
    if (!fd.is_open())
        return;
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n > 0) {
            into.append(buf, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            fd.reset();  // end of file (or a broken pipe): nothing more will come
        return;
    }
}

void child_process::drain(milliseconds timeout)
{
    std::array<pollfd, 2> fds{};
    nfds_t count = 0;
    if (stdout_.is_open())
        fds[count++] = {stdout_.get(), POLLIN, 0};
    if (stderr_.is_open())
        fds[count++] = {stderr_.get(), POLLIN, 0};
    if (count == 0) {
        std::this_thread::sleep_for(timeout);
        return;
    }
    int r = ::poll(fds.data(), count, static_cast<int>(timeout.count()));
    if (r < 0 && errno != EINTR)
        throw error::from_errno(errno, "poll");
    read_available(stdout_, out_);
    read_available(stderr_, err_);
}

bool child_process::write_stdin(std::string_view text)
{
    if (!stdin_.is_open())
        throw std::logic_error("write_stdin after close_stdin on " + describe());

    // A write to a pipe nobody reads raises SIGPIPE; block it in this thread
    // and consume it, so a dead child is a return value, not a dead test.
    sigset_t pipe_set, old_mask, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);

    bool ok = true;
    auto deadline = clock::now() + stdin_write_timeout;
    while (!text.empty()) {
        ssize_t n = ::write(stdin_.get(), text.data(), text.size());
        if (n > 0) {
            text.remove_prefix(static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            pollfd pfd{stdin_.get(), POLLOUT, 0};
            if (::poll(&pfd, 1, static_cast<int>(remaining(deadline).count())) == 0) {
                pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
                throw std::runtime_error(fmt::format("{} did not read its stdin within {} ms", describe(),
                                                     stdin_write_timeout.count()));
            }
            continue;
        }
        ok = false;  // EPIPE: the child closed its end or is gone
        if (!was_pending) {
            timespec zero{};
            ::sigtimedwait(&pipe_set, nullptr, &zero);
        }
        break;
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    return ok;
}

void child_process::close_stdin() { stdin_.reset(); }

std::optional<std::string> child_process::read_line(milliseconds timeout)
{
    if (!stdout_.is_open() && out_pos_ >= out_.size())
        return std::nullopt;
    auto deadline = clock::now() + timeout;
    for (;;) {
        auto nl = out_.find('\n', out_pos_);
        if (nl != std::string::npos) {
            std::string line = out_.substr(out_pos_, nl - out_pos_);
            out_pos_ = nl + 1;
            return line;
        }
        if (!stdout_.is_open()) {
            if (out_pos_ < out_.size()) {
                std::string line = out_.substr(out_pos_);
                out_pos_ = out_.size();
                return line;
            }
            return std::nullopt;
        }
        auto left = remaining(deadline);
        if (left.count() == 0) {
            read_available(stdout_, out_);  // one last look
            if (out_.find('\n', out_pos_) == std::string::npos && stdout_.is_open())
                return std::nullopt;
            continue;
        }
        drain(left);
    }
}

std::string child_process::require_line(milliseconds timeout)
{
    if (auto line = read_line(timeout))
        return *line;
    throw std::runtime_error(fmt::format("{}: no line on stdout within {} ms{}; stderr: {}", describe(),
                                         timeout.count(), stdout_.is_open() ? "" : " (stdout closed)",
                                         trimmed(stderr_text())));
}

std::string child_process::ask(std::string_view line, milliseconds timeout)
{
    std::string with_newline(line);
    with_newline += '\n';
    if (!write_stdin(with_newline))
        throw std::runtime_error(fmt::format("{}: stdin closed while sending '{}'; stderr: {}", describe(), line,
                                             trimmed(stderr_text())));
    return require_line(timeout);
}

std::optional<exit_status> child_process::wait_exit(milliseconds timeout)
{
    if (pid_ < 0)
        return status_;
    auto deadline = clock::now() + timeout;
    while (!try_reap()) {
        auto left = remaining(deadline);
        if (left.count() == 0)
            return std::nullopt;
        // Short slices: exit is noticed by polling waitid, output by poll().
        drain(std::min(left, milliseconds{5}));
    }
    read_available(stdout_, out_);
    read_available(stderr_, err_);
    return status_;
}

exit_status child_process::require_exit(milliseconds timeout)
{
    if (auto st = wait_exit(timeout))
        return *st;
    throw std::runtime_error(fmt::format("{} did not exit within {} ms; stderr: {}", describe(), timeout.count(),
                                         trimmed(stderr_text())));
}

bool child_process::send_signal(int sig)
{
    if (pid_ < 0 || status_)
        return false;
    return ::kill(pid_, sig) == 0;
}

const std::string& child_process::stdout_text()
{
    read_available(stdout_, out_);
    return out_;
}

const std::string& child_process::stderr_text()
{
    read_available(stderr_, err_);
    return err_;
}

void child_process::kill_and_reap()
{
    if (pid_ < 0 || status_) {
        release();
        return;
    }
    // The group first: nothing the child started outlives the test. Only
    // while the child is unreaped is its pid known to still name the group.
    if (own_process_group_)
        ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);

    auto deadline = clock::now() + kill_reap_timeout;
    for (;;) {
        int raw = 0;
        pid_t r = ::waitpid(pid_, &raw, WNOHANG | __WALL);
        if (r == pid_ && (WIFEXITED(raw) || WIFSIGNALED(raw))) {
            status_ = exit_status::from_wait(raw);
            break;
        }
        if (r < 0 && errno == ECHILD) {
            status_ = exit_status::reaped_elsewhere();
            break;
        }
        if (r == pid_)  // a ptrace stop of a child this process traces
            ::ptrace(PTRACE_CONT, pid_, 0, 0);
        // Threads traced by this process stay zombies until their tracer
        // waits for them, and the leader cannot be reaped before they are.
        for (pid_t tid : task_tids(pid_)) {
            if (tid != pid_ && ::waitpid(tid, &raw, WNOHANG | __WALL) == tid && WIFSTOPPED(raw))
                ::ptrace(PTRACE_CONT, tid, 0, 0);
        }
        if (clock::now() > deadline) {
            std::fprintf(stderr, "warning: %s still not reaped %lld ms after SIGKILL; leaving it\n",
                         describe().c_str(), static_cast<long long>(kill_reap_timeout.count()));
            break;
        }
        std::this_thread::sleep_for(milliseconds{2});
    }
    release();
}

void child_process::release()
{
    stdin_.reset();
    // Keep what was read; close the pipes so nothing blocks on them.
    if (stdout_.is_open())
        read_available(stdout_, out_);
    if (stderr_.is_open())
        read_available(stderr_, err_);
    stdout_.reset();
    stderr_.reset();
}

// ---------------------------------------------------------------- run_command

std::string shell_quote(const std::vector<std::string>& argv)
{
    std::string out;
    for (const auto& arg : argv) {
        if (!out.empty())
            out += ' ';
        bool plain = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                            "0123456789-_./=:,+@%") == std::string::npos;
        if (plain) {
            out += arg;
            continue;
        }
        out += '\'';
        for (char c : arg) {
            if (c == '\'')
                out += "'\\''";
            else
                out += c;
        }
        out += '\'';
    }
    return out;
}

std::string command_result::describe() const
{
    return fmt::format("`{}` {}\n--- stdout ---\n{}\n--- stderr ---\n{}", command, status.describe(), trimmed(out),
                       trimmed(err));
}

command_result run_command(const std::vector<std::string>& argv, milliseconds timeout, const run_options& options)
{
    spawn_options spawn_opts;
    spawn_opts.env = options.env;
    auto child = child_process::spawn(argv, spawn_opts);
    if (!options.stdin_text.empty())
        child.write_stdin(options.stdin_text);
    child.close_stdin();

    auto status = child.wait_exit(timeout);
    if (!status) {
        std::string out = child.stdout_text();
        std::string err = child.stderr_text();
        child.kill_and_reap();
        throw std::runtime_error(fmt::format("`{}` did not finish within {} ms (killed)\n--- stdout ---\n{}\n"
                                             "--- stderr ---\n{}",
                                             shell_quote(argv), timeout.count(), trimmed(out), trimmed(err)));
    }
    return command_result{*status, child.stdout_text(), child.stderr_text(), shell_quote(argv)};
}

}  // namespace tdctl::test
