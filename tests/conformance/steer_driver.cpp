#include "tests/conformance/steer_driver.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "base/error.hpp"
#include "core/thread_handle.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"

namespace tdctl::conformance {

namespace {

using clock = std::chrono::steady_clock;
constexpr auto command_timeout = 10s;

}  // namespace

steer_fixture::steer_fixture()
    : record_("tdctl-conformance-steer"),
      child_(test::child_process::spawn({test::fixture_path("steer"), "--record", record_.path()}))
{
    // One round trip: the fixture has loaded its libraries and runs its loop
    // (an attach before the loader mapped libc would find no thread library).
    if (std::string answer = ask("ping", nullptr); answer != "pong")
        throw std::runtime_error(fmt::format("steer: unexpected answer to ping: '{}'", answer));
}

void steer_fixture::pump_once(core::session* s, int timeout_ms)
{
    if (s == nullptr || !s->is_alive() || s->is_held())
        return;
    auto evs = s->pump(timeout_ms);
    events_.insert(events_.end(), std::make_move_iterator(evs.begin()), std::make_move_iterator(evs.end()));
}

std::string steer_fixture::ask(std::string_view command, core::session* s)
{
    std::string line(command);
    line += '\n';
    if (!child_.write_stdin(line))
        throw std::runtime_error(fmt::format("{}: stdin closed while sending '{}'; stderr: {}", child_.describe(),
                                             command, child_.stderr_text()));
    bool serviced = s != nullptr && s->is_alive() && !s->is_held();
    auto deadline = clock::now() + command_timeout;
    while (clock::now() < deadline) {
        pump_once(s, 2);
        if (auto answer = child_.read_line(serviced ? 1ms : 50ms))
            return *answer;
    }
    throw std::runtime_error(fmt::format("{}: no answer to '{}' within 10 s{}; stderr: {}", child_.describe(), command,
                                         s != nullptr && s->is_held() ? " (the session holds the target)" : "",
                                         child_.stderr_text()));
}

spawned_thread steer_fixture::spawn(core::session* s, bool detached)
{
    std::string answer = ask(detached ? "spawn-detached" : "spawn", s);
    std::istringstream in(answer);
    std::string word, handle_text;
    spawned_thread t;
    in >> word >> t.index >> t.tid >> handle_text;
    if (word != "thread" || in.fail() || t.tid <= 0 || !handle_text.starts_with("0x"))
        throw std::runtime_error(fmt::format("steer: unexpected answer to spawn: '{}'", answer));
    t.handle = target_addr{std::stoull(handle_text, nullptr, 16)};
    return t;
}

void steer_fixture::release(const spawned_thread& t, core::session* s)
{
    std::string answer = ask(fmt::format("release {}", t.index), s);
    if (answer != fmt::format("released {}", t.index))
        throw std::runtime_error(fmt::format("steer: unexpected answer to release {}: '{}'", t.index, answer));
    auto deadline = clock::now() + command_timeout;
    for (;;) {
        auto tids = test::task_tids(pid());
        if (std::find(tids.begin(), tids.end(), t.tid) == tids.end())
            break;
        if (clock::now() >= deadline)
            throw std::runtime_error(fmt::format("steer: thread {} (tid {}) still in /proc/{}/task 10 s after release",
                                                 t.index, t.tid, pid()));
        if (s != nullptr && s->is_alive() && !s->is_held())
            pump_once(s, 5);
        else
            ::usleep(2000);
    }
    pump_once(s, 0);
}

void steer_fixture::join(const spawned_thread& t, core::session* s)
{
    std::string answer = ask(fmt::format("join {}", t.index), s);
    if (answer != fmt::format("joined {}", t.index))
        throw std::runtime_error(fmt::format("steer: unexpected answer to join {}: '{}'", t.index, answer));
}

std::vector<core::session_event> steer_fixture::take_events()
{
    return std::exchange(events_, {});
}

void steer_fixture::pump_for(core::session& s, std::chrono::milliseconds duration)
{
    auto deadline = clock::now() + duration;
    while (clock::now() < deadline && s.is_alive() && !s.is_held())
        pump_once(&s, 5);
}

core::thread_handle handle_in(core::session& s, target_addr handle)
{
    REQUIRE(s.target().agent() != nullptr);
    return core::thread_handle(*s.target().agent(), handle);
}

core::thread_handle main_thread(core::session& s)
{
    REQUIRE(s.target().agent() != nullptr);
    auto th = s.target().agent()->map_lwp2thr(tid_t{s.target().pid()});
    REQUIRE_MESSAGE(th.has_value(), "map_lwp2thr(main) failed: ", td_name(th.error()));
    REQUIRE_FALSE(th->is_null());
    return *th;
}

td_thr_events_t mask_of(std::initializer_list<td_event_e> events)
{
    return events::make_event_set(events);
}

std::string describe_mask(const td_thr_events_t& m)
{
    std::string out = "{";
    for (int e = 1; e <= events::event_set_capacity; ++e) {
        if (!events::td_eventismember(m, static_cast<td_event_e>(e)))
            continue;
        if (out.size() > 1)
            out += ',';
        out += e <= TD_MAX_EVENT_NUM ? events::event_name(static_cast<td_event_e>(e)) : fmt::format("bit{}", e);
    }
    return out + "}";
}

bool same_mask(const td_thr_events_t& a, const td_thr_events_t& b)
{
    return std::equal(std::begin(a.event_bits), std::end(a.event_bits), std::begin(b.event_bits));
}

std::string td_name(td_err_e e)
{
    return td_err_name(e);
}

std::vector<std::uint8_t> peek(pid_t pid, target_addr addr, std::size_t len)
{
    auto bytes = test::read_proc_mem(pid, addr.value, len);
    REQUIRE_MESSAGE(bytes.size() == len, fmt::format("short read of /proc/{}/mem at {}", pid, addr));
    return bytes;
}

void poke(pid_t pid, target_addr addr, const std::vector<std::uint8_t>& bytes)
{
    std::string path = fmt::format("/proc/{}/mem", pid);
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE_MESSAGE(fd >= 0, fmt::format("open {}: {}", path, std::strerror(errno)));
    ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(addr.value));
    int err = errno;
    ::close(fd);
    REQUIRE_MESSAGE(n == static_cast<ssize_t>(bytes.size()),
                    fmt::format("write {} bytes at {} in {}: {}", bytes.size(), addr, path, std::strerror(err)));
}

}  // namespace tdctl::conformance
