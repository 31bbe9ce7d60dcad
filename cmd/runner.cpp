#include "cmd/runner.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <poll.h>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "cmd/commands.hpp"
#include "cmd/records.hpp"
#include "events/event_names.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::cmd {

using core::session_event;

runner::runner(std::unique_ptr<core::session> session, output& out, signal_source& signals, bool launched)
    : session_(std::move(session)), launched_(launched), out_(out), signals_(signals),
      summary_([](const events::event_message& msg) {
          // The new thread's start routine, read with the event buffer
          // (core::event_watch); 0 when unknown.
          return msg.start_routine.value;
      })
{
    out_.add_observer(&summary_);
}

runner::~runner()
{
    out_.remove_observer(&summary_);
}

bool runner::has_target() const
{
    return session_ && !detached_ && !exit_status_ && session_->is_alive();
}

// ---------------------------------------------------------------- errors and arguments

command_status runner::usage_error(const std::string& where, const std::string& message)
{
    out_.error("usage", fmt::format("{}: {}", where, message));
    return command_status::failed;
}

command_status runner::td_error(td_err_e err, const std::string& what)
{
    out_.error(td_err_name(err), fmt::format("{}: {} ({})", what, td_err_name(err), td_err_description(err)));
    return command_status::failed;
}

bool runner::require_target(const std::string& where)
{
    if (has_target())
        return true;
    std::string why = exit_status_ ? "the target has exited" : "tdctl is no longer attached to the target";
    out_.error("no-target", fmt::format("{}: {}; `attach PID` or `run PROG [ARGS]` starts another session", where,
                                        why));
    return false;
}

bool runner::require_agent(const std::string& where)
{
    if (!require_target(where))
        return false;
    if (session_->target().agent() != nullptr)
        return true;
    out_.error("TD_NOLIBTHREAD", fmt::format("{}: TD_NOLIBTHREAD ({}): {}", where, td_err_description(TD_NOLIBTHREAD),
                                             session_->target().no_agent_reason()));
    return false;
}

std::optional<run_options> runner::parse_options(const words& w, std::size_t first, const run_option_grammar& grammar,
                                                 const std::string& where)
{
    auto options = parse_run_options(w, first, grammar);
    if (!options) {
        usage_error(where, options.error());
        return std::nullopt;
    }
    return *options;
}

std::optional<std::vector<td_event_e>> runner::parse_events(const std::string& text, const std::string& where)
{
    auto list = events::parse_event_list(text);
    if (!list) {
        usage_error(where, list.error());
        return std::nullopt;
    }
    return *list;
}

std::optional<tid_t> runner::parse_tid_word(const std::string& text, const std::string& where, const char* accepted)
{
    auto tid = parse_tid(text);
    if (!tid) {
        usage_error(where, fmt::format("'{}' is not {}", text, accepted));
        return std::nullopt;
    }
    return tid_t{*tid};
}

std::optional<core::thread_handle> runner::handle_for(const std::string& tid_text, const std::string& where)
{
    auto tid = parse_tid_word(tid_text, where, "a thread ID (a TID from `threads`)");
    if (!tid)
        return std::nullopt;
    auto th = session_->target().agent()->map_lwp2thr(*tid);
    if (!th) {
        td_error(th.error(), fmt::format("{}: thread {}", where, tid->value));
        return std::nullopt;
    }
    return *th;
}

// ---------------------------------------------------------------- what the target does

void runner::print_exit(int raw)
{
    out_.print(exit_record{session_->target().pid(), raw, seconds_since_start()});
}

void runner::note_exit(int raw)
{
    exit_status_ = raw;
    print_exit(raw);
}

void runner::show(const session_event& ev)
{
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
        out_.print(exec_record{session_->target().pid(), ev.message.name, library_of(*session_).backend, ev.message.time});
        break;
    case session_event::kind::routing:
        out_.print(routing_record{session_->target().pid(), ev.note, seconds_since_start()});
        break;
    }
}

namespace {

// How long poll() may sleep before `deadline`: rounded up, so that it does
// not return before the deadline; nullopt once it has passed.
std::optional<int> ms_until(std::chrono::steady_clock::time_point deadline)
{
    auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0)
        return std::nullopt;
    return static_cast<int>(std::min<long long>((left + 999) / 1000, 1000 * 60 * 60));
}

}  // namespace

run_end runner::run_until(std::optional<double> seconds, const std::function<bool(const session_event&)>& on_event)
{
    using clock = std::chrono::steady_clock;
    std::optional<clock::time_point> deadline;
    if (seconds)
        deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(*seconds));
    last_signal_ = 0;
    // The target runs while tdctl waits on it (a `watch` or `stop` that took
    // over a lingering stop to arm lets it go here).
    if (session_ && session_->is_alive())
        session_->release_lingering();
    // The run ends when the target has gone, or nobody can read what
    // happens next (then as SIGTERM would end it).
    auto session_or_output_ended = [&]() -> std::optional<run_end> {
        if (!session_->is_alive())
            return exit_status_ ? run_end::exited : run_end::detached;
        if (!out_.ok()) {
            must_exit_ = true;
            return run_end::signal;
        }
        return std::nullopt;
    };
    // Each event to on_event; the run ends at the target's exit or when on_event says so.
    auto hand_out = [&](const std::vector<session_event>& events) -> std::optional<run_end> {
        for (const auto& ev : events) {
            bool done = on_event(ev);
            if (ev.what == session_event::kind::process_exited)
                return run_end::exited;
            if (done)
                return run_end::done;
        }
        return std::nullopt;
    };
    // Lines are written out by the waker's thread, not one by one.
    output::deferred batch(out_);
    run_waker& waker = this->waker();
    waker.begin_run();
    struct end_guard {
        run_waker& w;
        ~end_guard() { w.end_run(); }
    } end{waker};
    for (;;) {
        if (auto end = session_or_output_ended())
            return *end;
        if (waker.attention() || !waker.usable()) {
            waker.clear_attention();
            if (int sig = signals_.take(); sig != 0) {
                take_signal(sig);
                return run_end::signal;
            }
        }
        int wait_ms = -1;
        if (deadline) {
            auto left = ms_until(*deadline);
            if (!left)
                return run_end::timeout;
            wait_ms = *left;
        }
        // Without the waker's thread nothing ends a wait for a signal.
        if (!waker.usable() && (wait_ms < 0 || wait_ms > ptrace::waiter::repoll_ms))
            wait_ms = ptrace::waiter::repoll_ms;
        auto events = session_->pump(wait_ms);
        if (session_->target().process().last_wait() == ptrace::wait_end::no_child) {
            // Nothing to wait for with waitpid(): sleep on the signals instead.
            pollfd p{signals_.fd(), POLLIN, 0};
            ::poll(&p, 1, ptrace::waiter::repoll_ms);
        }
        if (auto end = hand_out(events))
            return *end;
    }
}

run_waker& runner::waker()
{
    if (!waker_)
        waker_ = std::make_unique<run_waker>(signals_.fd(), [this] { out_.flush_buffered(); });
    return *waker_;
}

void runner::wait_for_input(int input_fd, int timeout_ms)
{
    if (!has_target()) {
        pollfd fds[2] = {{input_fd, POLLIN, 0}, {signals_.fd(), POLLIN, 0}};
        ::poll(fds, 2, timeout_ms);
        return;
    }
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    run_waker& waker = this->waker();
    waker.begin_run(input_fd);
    struct end_guard {
        run_waker& w;
        ~end_guard() { w.end_run(); }
    } end{waker};
    while (has_target() && !waker.attention()) {
        int wait_ms = timeout_ms;
        if (timeout_ms >= 0) {
            auto left = ms_until(deadline);
            if (!left)
                return;
            wait_ms = *left;
        }
        if (!waker.usable() && (wait_ms < 0 || wait_ms > ptrace::waiter::repoll_ms))
            wait_ms = ptrace::waiter::repoll_ms;
        for (const auto& ev : session_->pump(wait_ms))
            show(ev);
        // The caller looks at its input and signals, and comes back.
        if (session_->target().process().last_wait() == ptrace::wait_end::no_child || !waker.usable())
            return;
    }
}

run_end runner::run_for(std::optional<double> seconds)
{
    return run_until(seconds, [&](const session_event& ev) {
        show(ev);
        return false;
    });
}

void runner::let_run()
{
    if (session_->is_held())
        session_->resume();
}

void runner::take_signal(int sig)
{
    last_signal_ = sig;
    if (sig != SIGINT)
        must_exit_ = true;
}

void runner::poll_target()
{
    if (has_target()) {
        for (const auto& ev : session_->pump(0))
            show(ev);
    }
    // The exit may have been taken while the session held the target for
    // some edit; report it once here.
    if (session_ && !exit_status_ && !detached_ && !session_->is_alive())
        if (auto st = session_->target().process().exit_status())
            note_exit(*st);
}

// ---------------------------------------------------------------- commands

command_status runner::execute(const std::string& line, const std::string& where)
{
    auto w = split_words(line);
    if (!w)
        return usage_error(where, w.error());
    if (w->empty())
        return command_status::ok;
    // Stops that came in since the last command (a thread born or ending)
    // are serviced first, so the target does not wait on a long script.
    poll_target();
    const command_entry* command = find_command(w->front());
    if (command == nullptr) {
        std::string names;
        for (const auto& c : command_table())
            names += (names.empty() ? "" : ", ") + std::string(c.name);
        return usage_error(where, fmt::format("unknown command '{}'; expected one of: {}", w->front(), names));
    }
    const bool follows = std::exchange(command_follows_, false);
    share_stop_round(*command, follows);
    command_status st = command_status::failed;
    try {
        st = (this->*command->run)(*w, where);
    } catch (const error& e) {
        out_.error(e.domain() == error_domain::td ? td_err_name(static_cast<td_err_e>(e.code())) : "error",
                   fmt::format("{}: {}", where, e.what()));
    }
    if (!follows && !detach_follows_ && session_ && session_->is_alive())
        session_->release_lingering();
    return st;
}

void runner::share_stop_round(const command_entry& command, bool follows)
{
    // Commands that look at or edit the target while every thread is
    // stopped: they take over a stop that lingers and, when another
    // command follows at once, hand theirs on.
    // `watch` and `stop` arm first (a stop of every thread they can take
    // over) and let the target run when they wait for it (session::pump).
    static constexpr std::array held_commands = {&runner::cmd_threads, &runner::cmd_event,    &runner::cmd_bt,
                                                 &runner::cmd_deadlock,
                                                 &runner::cmd_interrupt, &runner::cmd_detach, &runner::cmd_quit,
                                                 &runner::cmd_help,    &runner::cmd_watch,    &runner::cmd_stop};
    const bool holds = std::find(held_commands.begin(), held_commands.end(), command.run) != held_commands.end();
    if (!session_ || !session_->is_alive())
        return;
    if (!holds)
        session_->release_lingering();
    session_->set_hold_may_linger(holds && (follows || detach_follows_));
}

command_status runner::watch_until_exit()
{
    return cmd_watch({"watch"}, "watch");
}

command_status runner::cmd_quit(const words&, const std::string&)
{
    return command_status::quit;
}

command_status runner::cmd_help(const words& w, const std::string& where)
{
    // `help event set` is the help of `event`: commands have one help text each.
    std::string text = help_text(w.size() >= 2 ? w[1] : "");
    if (text.empty())
        return usage_error(where, fmt::format("no help for '{}'", w[1]));
    out_.print(help_record{text});
    return command_status::ok;
}

}  // namespace tdctl::cmd
