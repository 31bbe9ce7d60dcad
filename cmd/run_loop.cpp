#include "cmd/run_loop.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <poll.h>
#include <vector>

#include "base/clock.hpp"
#include "cmd/records.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::cmd {

using core::session_event;

namespace {

using clock = std::chrono::steady_clock;

// How long a wait may sleep before `deadline`: rounded up, so that it does
// not return before the deadline; nullopt once it has passed.
std::optional<int> ms_until(clock::time_point deadline)
{
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - clock::now()).count();
    if (left <= 0)
        return std::nullopt;
    return static_cast<int>(std::min<long long>((left + 999) / 1000, 1000 * 60 * 60));
}

// Each event to on_event; the run ends at the target's exit or when on_event says so.
std::optional<run_end> hand_out(const std::vector<session_event>& events,
                                const std::function<bool(const session_event&)>& on_event)
{
    for (const auto& ev : events) {
        bool done = on_event(ev);
        if (ev.what == session_event::kind::process_exited)
            return run_end::exited;
        if (done)
            return run_end::done;
    }
    return std::nullopt;
}

// The waker's run, ended on every path.
class run_scope {
public:
    run_scope(run_waker& waker, int watch_fd) : waker_(waker) { waker_.begin_run(watch_fd); }
    ~run_scope() { waker_.end_run(); }
    run_scope(const run_scope&) = delete;
    run_scope& operator=(const run_scope&) = delete;

private:
    run_waker& waker_;
};

}  // namespace

run_loop::run_loop(session_slot& target, output& out, signal_source& signals)
    : target_(target), out_(out), signals_(signals)
{
}

run_loop::~run_loop() = default;

run_waker& run_loop::waker()
{
    if (!waker_)
        waker_ = std::make_unique<run_waker>(signals_.fd(), [this] { out_.flush_buffered(); });
    return *waker_;
}

std::optional<run_end> run_loop::target_or_output_ended()
{
    if (!target_.session().is_alive())
        return target_.exit_status() ? run_end::exited : run_end::detached;
    if (!out_.ok()) {
        must_exit_ = true;
        return run_end::signal;
    }
    return std::nullopt;
}

bool run_loop::signal_arrived(run_waker& waker)
{
    if (!waker.attention() && waker.usable())
        return false;
    waker.clear_attention();
    int sig = signals_.take();
    if (sig == 0)
        return false;
    take_signal(sig);
    return true;
}

std::optional<int> run_loop::next_wait_ms(const std::optional<clock::time_point>& deadline,
                                          const run_waker& waker) const
{
    int wait_ms = -1;
    if (deadline) {
        auto left = ms_until(*deadline);
        if (!left)
            return std::nullopt;
        wait_ms = *left;
    }
    // Without the waker's thread nothing ends a wait for a signal.
    if (!waker.usable() && (wait_ms < 0 || wait_ms > ptrace::waiter::repoll_ms))
        wait_ms = ptrace::waiter::repoll_ms;
    return wait_ms;
}

run_end run_loop::run_until(std::optional<double> seconds, const std::function<bool(const session_event&)>& on_event)
{
    std::optional<clock::time_point> deadline;
    if (seconds)
        deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(*seconds));
    last_signal_ = 0;
    // The target runs while tdctl waits on it (a `watch` or `stop` that took
    // over a lingering stop to arm lets it go here).
    if (target_.is_alive())
        target_.session().release_lingering();
    // Lines are written out by the waker's thread, not one by one.
    output::deferred batch(out_);
    run_waker& waker = this->waker();
    run_scope run(waker, -1);
    for (;;) {
        if (auto end = target_or_output_ended())
            return *end;
        if (signal_arrived(waker))
            return run_end::signal;
        auto wait_ms = next_wait_ms(deadline, waker);
        if (!wait_ms)
            return run_end::timeout;
        auto events = target_.session().pump(*wait_ms);
        if (target_.session().target().process().last_wait() == ptrace::wait_end::no_child) {
            // Nothing to wait for with waitpid(): sleep on the signals instead.
            pollfd p{signals_.fd(), POLLIN, 0};
            ::poll(&p, 1, ptrace::waiter::repoll_ms);
        }
        if (auto end = hand_out(events, on_event))
            return *end;
    }
}

run_end run_loop::run_for(std::optional<double> seconds)
{
    return run_until(seconds, [&](const session_event& ev) {
        show(ev);
        return false;
    });
}

void run_loop::wait_for_input(int input_fd, int timeout_ms)
{
    if (!target_.has_target()) {
        pollfd fds[2] = {{input_fd, POLLIN, 0}, {signals_.fd(), POLLIN, 0}};
        ::poll(fds, 2, timeout_ms);
        return;
    }
    std::optional<clock::time_point> deadline;
    if (timeout_ms >= 0)
        deadline = clock::now() + std::chrono::milliseconds(timeout_ms);
    run_waker& waker = this->waker();
    run_scope run(waker, input_fd);
    while (target_.has_target() && !waker.attention()) {
        auto wait_ms = next_wait_ms(deadline, waker);
        if (!wait_ms)
            return;
        for (const auto& ev : target_.session().pump(*wait_ms))
            show(ev);
        // The caller looks at its input and signals, and comes back.
        if (target_.session().target().process().last_wait() == ptrace::wait_end::no_child || !waker.usable())
            return;
    }
}

void run_loop::pause(double seconds)
{
    pollfd p{signals_.fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(seconds * 1000));
    if (int sig = signals_.take(); sig != 0)
        take_signal(sig);
}

void run_loop::poll_target()
{
    if (target_.has_target()) {
        for (const auto& ev : target_.session().pump(0))
            show(ev);
    }
    // The exit may have been taken while the session held the target for
    // some edit; report it once here.
    if (target_.has_session() && !target_.exit_status() && !target_.detached() && !target_.session().is_alive())
        if (auto st = target_.session().target().process().exit_status())
            note_exit(*st);
}

void run_loop::show(const session_event& ev)
{
    core::session& session = target_.session();
    switch (ev.what) {
    case session_event::kind::message:
        out_.event(ev.message);
        break;
    case session_event::kind::stopped_at_event:
        out_.print(stopped_record{ev.message});
        break;
    case session_event::kind::process_exited:
        note_exit(ev.status);
        break;
    case session_event::kind::exec:
        out_.print(exec_record{session.target().pid(), ev.message.name, library_of(session).backend, ev.message.time});
        break;
    case session_event::kind::routing:
        out_.print(routing_record{session.target().pid(), ev.note, seconds_since_start()});
        break;
    }
}

void run_loop::print_exit(int raw)
{
    out_.print(exit_record{target_.session().target().pid(), raw, seconds_since_start()});
}

void run_loop::note_exit(int raw)
{
    target_.note_exit(raw);
    print_exit(raw);
}

void run_loop::let_run()
{
    if (target_.session().is_held())
        target_.session().resume();
}

void run_loop::take_signal(int sig)
{
    last_signal_ = sig;
    if (sig != SIGINT)
        must_exit_ = true;
}

}  // namespace tdctl::cmd
