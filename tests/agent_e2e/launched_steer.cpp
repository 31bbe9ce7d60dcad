#include "tests/agent_e2e/launched_steer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "base/error.hpp"
#include "core/thread_handle.hpp"
#include "ptrace/traced_process.hpp"
#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/support/proc.hpp"

namespace tdctl::agent_e2e {

namespace {

using clock = std::chrono::steady_clock;
constexpr auto command_timeout = std::chrono::seconds(10);

}  // namespace

const char* backend_name(backend b)
{
    return b == backend::nptl ? "nptl" : "tdagent";
}

std::vector<td_event_e> supported_events(backend b)
{
    if (b == backend::nptl)
        return {TD_CREATE, TD_DEATH};
    return {TD_READY,   TD_SLEEP, TD_LOCK_TRY, TD_CATCHSIG,    TD_CREATE,
            TD_DEATH,   TD_REAP,  TD_PRI_INHERIT, TD_CONCURRENCY, TD_TIMEOUT};
}

std::vector<td_event_e> unsupported_events(backend b)
{
    auto yes = supported_events(b);
    std::vector<td_event_e> out;
    for (int n = TD_MIN_EVENT_NUM; n <= TD_MAX_EVENT_NUM; ++n)
        if (std::find(yes.begin(), yes.end(), static_cast<td_event_e>(n)) == yes.end())
            out.push_back(static_cast<td_event_e>(n));
    return out;
}

launched_steer::launched_steer(backend b) : backend_(b), record_("tdctl-agent-e2e-steer")
{
    // Our ends close on exec; the child's ends are inherited.
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0)
        throw std::runtime_error(fmt::format("pipe2: {}", std::strerror(errno)));
    unique_fd child_in(to_child[0]), child_out(from_child[1]);
    commands_ = unique_fd(to_child[1]);
    answers_ = unique_fd(from_child[0]);
    ::fcntl(child_in.get(), F_SETFD, 0);
    ::fcntl(child_out.get(), F_SETFD, 0);
    ::fcntl(answers_.get(), F_SETFL, O_NONBLOCK);

    ptrace::launch_options opts;
    opts.argv = {fixture_path("e2e_steer_fds"), std::to_string(child_in.get()), std::to_string(child_out.get()),
                 "--record", record_.path()};
    if (b == backend::tdagent)
        opts.extra_env = {"LD_PRELOAD=" + agent_library()};
    session_ = core::session::launch(opts);
    pid_ = session_->target().pid();
    child_in.reset();
    child_out.reset();

    REQUIRE_MESSAGE(session_->target().agent() != nullptr, "no thread agent: ", session_->target().no_agent_reason());
    REQUIRE(session_->target().agent()->backend() == backend_name(b));
    session_->resume();
    // One round trip: past libc's start-up, in steer's command loop.
    std::string pong = ask("ping");
    REQUIRE(pong == "pong");
}

launched_steer::~launched_steer()
{
    commands_.reset();   // steer ends at end of file
    if (session_ && session_->is_alive()) {
        session_->kill();
        return;
    }
    session_.reset();
    // Detached (or gone while traced and reaped by the session): reap it
    // ourselves if it is still our child.
    auto deadline = clock::now() + std::chrono::seconds(5);
    while (clock::now() < deadline) {
        int status = 0;
        pid_t r = ::waitpid(pid_, &status, WNOHANG | __WALL);
        if (r == pid_ || (r < 0 && errno == ECHILD))
            return;
        ::usleep(2000);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, __WALL);
}

void launched_steer::pump_once(int timeout_ms)
{
    if (!session_->is_alive() || session_->is_held())
        return;
    auto evs = session_->pump(timeout_ms);
    events_.insert(events_.end(), std::make_move_iterator(evs.begin()), std::make_move_iterator(evs.end()));
}

std::optional<std::string> launched_steer::read_answer(int timeout_ms)
{
    for (;;) {
        if (auto nl = pending_.find('\n'); nl != std::string::npos) {
            std::string line = pending_.substr(0, nl);
            pending_.erase(0, nl + 1);
            return line;
        }
        pollfd p{answers_.get(), POLLIN, 0};
        if (::poll(&p, 1, timeout_ms) <= 0)
            return std::nullopt;
        char buf[512];
        ssize_t n = ::read(answers_.get(), buf, sizeof buf);
        if (n <= 0)
            return std::nullopt;
        pending_.append(buf, static_cast<std::size_t>(n));
        timeout_ms = 0;
    }
}

std::string launched_steer::ask(std::string_view command)
{
    std::string line = std::string(command) + "\n";
    if (::write(commands_.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        throw std::runtime_error(fmt::format("steer (pid {}): cannot send '{}': {}", pid_, command,
                                             std::strerror(errno)));
    bool serviced = session_->is_alive() && !session_->is_held();
    auto deadline = clock::now() + command_timeout;
    while (clock::now() < deadline) {
        pump_once(2);
        if (auto answer = read_answer(serviced ? 1 : 50))
            return *answer;
    }
    throw std::runtime_error(fmt::format("steer (pid {}, {}): no answer to '{}' within 10 s{}", pid_,
                                         backend_name(backend_), command,
                                         session_->is_held() ? " (the session holds the target)" : ""));
}

steered_thread launched_steer::spawn(bool detached)
{
    std::string answer = ask(detached ? "spawn-detached" : "spawn");
    std::istringstream in(answer);
    std::string word, handle_text;
    steered_thread t;
    in >> word >> t.index >> t.tid >> handle_text;
    if (word != "thread" || in.fail() || t.tid <= 0 || !handle_text.starts_with("0x"))
        throw std::runtime_error(fmt::format("steer: unexpected answer to spawn: '{}'", answer));
    t.pthread = std::stoull(handle_text, nullptr, 16);
    // The thread is registered before it runs user code (both backends), so
    // its handle is on the thread list by now.
    auto th = session_->target().agent()->map_lwp2thr(tid_t{t.tid});
    REQUIRE_MESSAGE(th.has_value(), "map_lwp2thr(", t.tid, "): ", td_err_name(th.error()));
    t.handle = th->value();
    if (backend_ == backend::nptl)
        CHECK(t.handle.value == t.pthread);
    return t;
}

void launched_steer::release(const steered_thread& t)
{
    std::string answer = ask(fmt::format("release {}", t.index));
    if (answer != fmt::format("released {}", t.index))
        throw std::runtime_error(fmt::format("steer: unexpected answer to release {}: '{}'", t.index, answer));
    auto deadline = clock::now() + command_timeout;
    for (;;) {
        auto tids = test::task_tids(pid_);
        if (std::find(tids.begin(), tids.end(), t.tid) == tids.end())
            break;
        if (clock::now() >= deadline)
            throw std::runtime_error(fmt::format("steer: thread {} (tid {}) still in /proc/{}/task 10 s after release",
                                                 t.index, t.tid, pid_));
        if (session_->is_alive() && !session_->is_held())
            pump_once(5);
        else
            ::usleep(2000);
    }
    pump_once(0);
}

void launched_steer::join(const steered_thread& t)
{
    std::string answer = ask(fmt::format("join {}", t.index));
    if (answer != fmt::format("joined {}", t.index))
        throw std::runtime_error(fmt::format("steer: unexpected answer to join {}: '{}'", t.index, answer));
}

void launched_steer::pump_for(std::chrono::milliseconds duration)
{
    auto deadline = clock::now() + duration;
    while (clock::now() < deadline && session_->is_alive() && !session_->is_held())
        pump_once(5);
}

std::vector<core::session_event> launched_steer::take_events()
{
    return std::exchange(events_, {});
}

}  // namespace tdctl::agent_e2e
