// The commands that let the target run or end its session: `stop`, `watch`,
// `sleep`, `continue`, `interrupt`, `detach`, `kill`.
#include <csignal>
#include <poll.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "cmd/records.hpp"
#include "cmd/runner.hpp"
#include "cmd/summary_view.hpp"
#include "cmd/trace_output.hpp"
#include "cmd/usage_view.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"

namespace tdctl::cmd {

using core::session_event;

namespace {

std::string join_events(const std::vector<td_event_e>& list)
{
    std::string s;
    for (td_event_e e : list)
        s += (s.empty() ? "" : ", ") + events::event_short_name(e);
    return s.empty() ? "none" : s;
}

// The events of `list` the global mask does not hold.
std::vector<td_event_e> missing_from(const td_thr_events_t& mask, const std::vector<td_event_e>& list)
{
    std::vector<td_event_e> missing;
    for (td_event_e e : list)
        if (!events::td_eventismember(mask, e))
            missing.push_back(e);
    return missing;
}

// `watch --bt`: the session's events carry stacks for the length of a scope.
class event_stacks_scope {
public:
    event_stacks_scope(core::session& s, int depth) : s_(s) { s_.stacks().set_event_stacks(depth); }
    ~event_stacks_scope() { s_.stacks().set_event_stacks(0); }
    event_stacks_scope(const event_stacks_scope&) = delete;
    event_stacks_scope& operator=(const event_stacks_scope&) = delete;

private:
    core::session& s_;
};

const char* end_reason(run_end end)
{
    switch (end) {
    case run_end::done: return "count";
    case run_end::timeout: return "duration";
    case run_end::signal: return "signal";
    case run_end::exited: return "exit";
    case run_end::detached: return "detached";
    }
    return "detached";
}

}  // namespace

command_status runner::cmd_stop(const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{option_for, run_option_grammar::operand_kind::any, "",
                                                "usage: stop EVENTS [--for SECONDS]"};
    auto options = parse_options(w, 1, grammar, where);
    if (!options)
        return command_status::failed;
    if (options->operand.empty())
        return usage_error(where, std::string(grammar.usage));
    auto list = parse_events(options->operand, where);
    if (!list || !require_agent(where))
        return command_status::failed;
    if (auto r = session_->watch().plant_stops(*list); !r)
        return td_error(r.error(), fmt::format("{}: stop {}", where, options->operand));

    // A hint when nothing can report: the seed's flow needs the mask and the
    // enable flag set first.
    if (auto g = session_->target().agent()->global_mask()) {
        if (auto missing = missing_from(*g, *list); !missing.empty())
            out_.note(fmt::format("note: {} not in the global event mask; threads report only what their mask or "
                                  "the global mask holds (`event set {}`, `event enable on all`)",
                                  join_events(missing), join_events(missing)));
    }
    let_run();
    bool stopped = false;
    auto end = run_until(options->for_seconds, [&](const session_event& ev) {
        show(ev);
        stopped = ev.what == session_event::kind::stopped_at_event;
        return stopped;
    });
    if (!stopped && session_->is_alive()) {
        session_->clear_stops();
        if (end == run_end::timeout) {
            out_.note(fmt::format("no {} within {} s", join_events(*list), *options->for_seconds));
            return command_status::timed_out;
        }
        if (end == run_end::signal)
            out_.note("interrupted");
    }
    return command_status::ok;
}

std::optional<std::vector<td_event_e>> runner::watch_events(const std::string& text, const std::string& where)
{
    auto* agent = session_->target().agent();
    std::vector<td_event_e> reported = agent->supported_events();
    if (text.empty())
        return reported;
    auto parsed = parse_events(text, where);
    if (!parsed)
        return std::nullopt;
    std::vector<td_event_e> unsupported;
    for (td_event_e e : *parsed)
        if (!agent->reporting_address_of(e))
            unsupported.push_back(e);
    if (text == "all") {
        if (!unsupported.empty())
            out_.note(fmt::format("note: {} reports only {}", agent->backend(), join_events(reported)));
        return reported;
    }
    if (!unsupported.empty()) {
        td_error(TD_NOEVENT, fmt::format("{}: watch {} ({} does not report {})", where, text, agent->backend(),
                                         events::event_name(unsupported.front())));
        return std::nullopt;
    }
    return parsed;
}

command_status runner::cmd_watch(const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{option_for | option_count | option_bt,
                                                run_option_grammar::operand_kind::plain, " (e.g. 5, 2.5s, 500ms)",
                                                "usage: watch [EVENTS] [--count N] [--for SECONDS] [--bt[=DEPTH]]"};
    auto options = parse_options(w, 1, grammar, where);
    if (!options || !require_agent(where))
        return command_status::failed;
    auto list = watch_events(options->operand, where);
    if (!list)
        return command_status::failed;
    if (auto r = session_->arm(*list); !r)
        return td_error(r.error(), fmt::format("{}: watch", where));
    core::usage_window_scope usage(session_->accounting(), core::counter_depth::times, time_split_named_rows);
    event_stacks_scope stacks(*session_, static_cast<int>(options->bt.value_or(0)));
    if (trace_ != nullptr)
        trace_->observe(*session_);
    const std::size_t summary_mark = summary_.mark();
    let_run();

    const auto count = options->count;
    long long seen = 0;
    auto end = run_until(options->for_seconds, [&](const session_event& ev) {
        if (ev.what != session_event::kind::message) {
            show(ev);
            return false;
        }
        out_.event(ev.message);
        ++seen;
        return count && seen >= *count;
    });
    auto split = session_->accounting().take_usage_window();
    // Closed before the disarm: its settling takes every late exit stop,
    // and none of them need reading any more. Detach puts back what arm
    // changed anyway (the session's originals): a watch it follows leaves
    // the disarm to it.
    session_->accounting().close_usage_window();
    if (session_->is_alive() && !detach_follows_ && !must_exit_)
        session_->disarm();
    out_.print(watch_end_record{seen, end_reason(end), seconds_since_start()});
    print_time_split("watch", split);
    if (seen > 0)
        print_summary("watch", summary_.counts(summary_mark), summary_default_top);
    return command_status::ok;
}

command_status runner::cmd_sleep(const words& w, const std::string& where)
{
    if (w.size() != 2)
        return usage_error(where, "usage: sleep SECONDS");
    auto seconds = parse_duration(w[1]);
    if (!seconds)
        return usage_error(where, fmt::format("bad duration '{}'", w[1]));
    // "Let the target run": a target held at its entry point or by
    // `interrupt` runs now.
    if (has_target())
        let_run();
    if (has_target()) {
        core::usage_window_scope usage(session_->accounting(), core::counter_depth::times, time_split_named_rows);
        run_for(seconds);
        print_time_split("sleep", session_->accounting().take_usage_window());
        return command_status::ok;
    }
    // Nothing to service: just wait, still interruptible.
    pollfd p{signals_.fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(*seconds * 1000));
    if (int sig = signals_.take(); sig != 0)
        take_signal(sig);
    return command_status::ok;
}

void runner::print_time_split(const std::string& command, const core::window_usage& split)
{
    if (split.lwps.empty())
        return;
    auto rows = time_split_rows(split, command, session_->target().pid(), seconds_since_start(), time_split_max_rows);
    output::bulk batch(out_);
    out_.heading(time_split_heading(command, rows.front().duration));
    for (const auto& row : rows)
        out_.print(row);
}

// ---------------------------------------------------------------- run control

bool runner::bare_command_ready(const words& w, const std::string& where, const char* name)
{
    if (w.size() != 1) {
        usage_error(where, fmt::format("usage: {}", name));
        return false;
    }
    return require_target(where);
}

command_status runner::cmd_continue(const words& w, const std::string& where)
{
    if (!bare_command_ready(w, where, "continue"))
        return command_status::failed;
    if (!session_->is_held()) {
        out_.note("the target is already running");
        return command_status::ok;
    }
    session_->resume();
    out_.print(continued_record{session_->target().pid()});
    return command_status::ok;
}

command_status runner::cmd_interrupt(const words& w, const std::string& where)
{
    if (!bare_command_ready(w, where, "interrupt"))
        return command_status::failed;
    session_->interrupt();
    out_.print(interrupted_record{session_->target().pid(), session_->target().lwps().size()});
    return command_status::ok;
}

command_status runner::cmd_detach(const words& w, const std::string& where)
{
    if (!bare_command_ready(w, where, "detach"))
        return command_status::failed;
    session_->detach();
    detached_ = true;
    out_.print(detached_record{session_->target().pid(), seconds_since_start()});
    return command_status::ok;
}

command_status runner::cmd_kill(const words& w, const std::string& where)
{
    if (!bare_command_ready(w, where, "kill"))
        return command_status::failed;
    session_->kill();
    if (auto st = session_->target().process().exit_status())
        note_exit(*st);
    return command_status::ok;
}

}  // namespace tdctl::cmd
