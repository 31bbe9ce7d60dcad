// The commands that let the target run or end its session: `stop`, `watch`,
// `sleep`, `continue`, `interrupt`, `detach`, `kill`, `quit`.
#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/quoting.hpp"
#include "cmd/commands.hpp"
#include "cmd/records.hpp"
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

// At most this many rows in a time split; the other threads are summed in one.
constexpr std::size_t time_split_max_rows = 32;
// The rows of a time split that can show a thread by name: the first
// time_split_max_rows, or all of max + 1 (time_split_rows() folds no lone row).
constexpr std::size_t time_split_named_rows = time_split_max_rows + 1;

// The split of every thread's time over the run of `command` ("watch",
// "sleep"), from the usage window taken at its end.
void print_time_split(command_context& c, const std::string& command, const core::window_usage& split)
{
    if (split.lwps.empty())
        return;
    const pid_t pid = c.session().target().pid();
    auto rows = time_split_rows(split, command, pid, seconds_since_start(), time_split_max_rows);
    output::bulk batch(c.out);
    c.out.heading(time_split_heading(command, rows.front().duration));
    for (const auto& row : rows)
        c.out.print(row);
}

// `watch`'s events: EVENTS checked against what the library reports, or
// every event it reports when `text` is empty. nullopt after an error.
std::optional<std::vector<td_event_e>> watch_events(command_context& c, const std::string& text,
                                                    const std::string& where)
{
    auto* agent = c.session().target().agent();
    std::vector<td_event_e> reported = agent->supported_events();
    if (text.empty())
        return reported;
    auto parsed = c.check.parse_events(text, where);
    if (!parsed)
        return std::nullopt;
    std::vector<td_event_e> unsupported;
    for (td_event_e e : *parsed)
        if (!agent->reporting_address_of(e))
            unsupported.push_back(e);
    if (text == "all") {
        if (!unsupported.empty())
            c.out.note(fmt::format("note: {} reports only {}", agent->backend(), join_events(reported)));
        return reported;
    }
    if (!unsupported.empty()) {
        c.check.td_error(TD_NOEVENT, fmt::format("{}: watch {} ({} does not report {})", where, word_excerpt(text),
                                                 agent->backend(), events::event_name(unsupported.front())));
        return std::nullopt;
    }
    return parsed;
}

// Streams the armed `events` from the agent's rings from now on (`drop`:
// an event a full ring cannot take is counted, not stopped), said in the
// watch's header. When the rings cannot be switched on: an error if
// `delivery` was asked for, else each report stops its thread, said so.
// False after the error.
bool start_delivery(command_context& c, const std::vector<td_event_e>& events, event_delivery& delivery, bool drop,
                    const std::string& where)
{
    using full_ring = core::event_stream::full_ring;
    if (delivery.stream && !c.session().stream().start(events, drop ? full_ring::drop : full_ring::report)) {
        if (delivery.asked) {
            c.check.usage_error(where, "watch --stream: the agent's event rings could not be switched on");
            return false;
        }
        delivery = {false, false, " (the agent's event rings could not be switched on)"};
    }
    if (!delivery.stream) {
        c.out.note(fmt::format("watch: {}: each report stops its thread{}", join_events(events),
                               delivery.stop_reason));
        return true;
    }
    const bool waits = c.session().stream().leaves_births_untraced();
    c.out.note(fmt::format("watch: {} through the agent's event rings, no stop per event ({})", join_events(events),
                           drop    ? "an event a full ring cannot take is counted as lost"
                           : waits ? "a report a full ring cannot take waits for room; new threads run untraced"
                                   : "a report a ring cannot take stops as usual"));
    return true;
}

}  // namespace

command_status cmd_stop(command_context& c, const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{option_for, run_option_grammar::operand_kind::any, "",
                                                "usage: stop EVENTS [--for SECONDS]"};
    auto options = c.check.parse_options(w, 1, grammar, where);
    if (!options)
        return command_status::failed;
    if (options->operand.empty())
        return c.check.usage_error(where, std::string(grammar.usage));
    auto list = c.check.parse_events(options->operand, where);
    if (!list || !c.check.require_agent(where))
        return command_status::failed;
    if (auto r = c.session().watch().plant_stops(*list); !r)
        return c.check.td_error(r.error(), fmt::format("{}: stop {}", where, word_excerpt(options->operand)));

    // A hint when nothing can report: the seed's flow needs the mask and the
    // enable flag set first.
    if (auto g = c.session().target().agent()->global_mask()) {
        if (auto missing = missing_from(*g, *list); !missing.empty())
            c.out.note(fmt::format("note: {} not in the global event mask; threads report only what their mask or "
                                   "the global mask holds (`event set {}`, `event enable on all`)",
                                   join_events(missing), join_events(missing)));
    }
    c.loop.let_run();
    bool stopped = false;
    auto end = c.loop.run_until(options->for_seconds, [&](const session_event& ev) {
        c.loop.show(ev);
        stopped = ev.what == session_event::kind::stopped_at_event;
        return stopped;
    });
    if (!stopped && c.session().is_alive()) {
        c.session().clear_stops();
        if (end == run_end::timeout) {
            c.out.note(fmt::format("no {} within {} s", join_events(*list), *options->for_seconds));
            return command_status::timed_out;
        }
        if (end == run_end::signal)
            c.out.note("interrupted");
    }
    return command_status::ok;
}

command_status cmd_watch(command_context& c, const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{
        option_for | option_count | option_bt | option_stream | option_drop | option_stop,
        run_option_grammar::operand_kind::plain, " (e.g. 5, 2.5s, 500ms)",
        "usage: watch [EVENTS] [--count N] [--for SECONDS] [--bt[=DEPTH]] [--stream | --stop] [--drop]"};
    auto options = c.check.parse_options(w, 1, grammar, where);
    if (!options || !c.check.require_agent(where))
        return command_status::failed;
    auto list = watch_events(c, options->operand, where);
    auto delivery = list ? c.check.choose_delivery(*options, "watch", "--bt needs each event to stop its thread", where)
                         : std::nullopt;
    if (!delivery)
        return command_status::failed;
    if (auto r = c.session().arm(*list); !r)
        return c.check.td_error(r.error(), fmt::format("{}: watch", where));
    if (!start_delivery(c, *list, *delivery, options->drop, where))
        return command_status::failed;
    core::usage_window_scope usage(c.session().accounting(), core::counter_depth::times, time_split_named_rows);
    event_stacks_scope stacks(c.session(), static_cast<int>(options->bt.value_or(0)));
    if (c.trace != nullptr)
        c.trace->observe(c.session());
    const std::size_t summary_mark = c.summary.mark();
    c.loop.let_run();

    const auto count = options->count;
    long long seen = 0;
    auto end = c.loop.run_until(options->for_seconds, [&](const session_event& ev) {
        if (ev.what != session_event::kind::message) {
            c.loop.show(ev);
            return false;
        }
        c.out.event(ev.message);
        ++seen;
        return count && seen >= *count;
    });
    // What the rings still hold was written before the watch ended.
    for (const auto& msg : c.session().stream().stop()) {
        if (count && seen >= *count)
            break;
        c.out.event(msg);
        ++seen;
    }
    for (const auto& loss : c.session().stream().losses())
        c.out.print(lost_record{loss.lwp.value, loss.count});
    auto split = c.session().accounting().take_usage_window();
    // Closed before the disarm: its settling takes every late exit stop,
    // and none of them need reading any more. Detach puts back what arm
    // changed anyway (the session's originals): a watch it follows leaves
    // the disarm to it.
    c.session().accounting().close_usage_window();
    if (c.session().is_alive() && !c.detach_follows && !c.loop.must_exit())
        c.session().disarm();
    c.out.print(watch_end_record{seen, end_reason(end), seconds_since_start()});
    print_time_split(c, "watch", split);
    if (seen > 0)
        print_summary(c, "watch", c.summary.counts(summary_mark), summary_default_top);
    return command_status::ok;
}

command_status cmd_sleep(command_context& c, const words& w, const std::string& where)
{
    if (w.size() != 2)
        return c.check.usage_error(where, "usage: sleep SECONDS");
    auto seconds = parse_duration(w[1]);
    if (!seconds)
        return c.check.usage_error(where, fmt::format("bad duration {}", quoted_word(w[1])));
    // "Let the target run": a target held at its entry point or by
    // `interrupt` runs now.
    if (c.target.has_target())
        c.loop.let_run();
    if (c.target.has_target()) {
        core::usage_window_scope usage(c.session().accounting(), core::counter_depth::times, time_split_named_rows);
        c.loop.run_for(seconds);
        print_time_split(c, "sleep", c.session().accounting().take_usage_window());
        return command_status::ok;
    }
    // Nothing to service: just wait, still interruptible.
    c.loop.pause(*seconds);
    return command_status::ok;
}

// ---------------------------------------------------------------- run control

command_status cmd_continue(command_context& c, const words& w, const std::string& where)
{
    if (!c.check.bare_command_ready(w, where, "continue"))
        return command_status::failed;
    if (!c.session().is_held()) {
        c.out.note("the target is already running");
        return command_status::ok;
    }
    c.session().resume();
    c.out.print(continued_record{c.session().target().pid()});
    return command_status::ok;
}

command_status cmd_interrupt(command_context& c, const words& w, const std::string& where)
{
    if (!c.check.bare_command_ready(w, where, "interrupt"))
        return command_status::failed;
    c.session().interrupt();
    c.out.print(interrupted_record{c.session().target().pid(), c.session().target().lwps().size()});
    return command_status::ok;
}

command_status cmd_detach(command_context& c, const words& w, const std::string& where)
{
    if (!c.check.bare_command_ready(w, where, "detach"))
        return command_status::failed;
    c.session().detach();
    c.target.note_detached();
    c.out.print(detached_record{c.session().target().pid(), seconds_since_start()});
    return command_status::ok;
}

command_status cmd_kill(command_context& c, const words& w, const std::string& where)
{
    if (!c.check.bare_command_ready(w, where, "kill"))
        return command_status::failed;
    c.session().kill();
    if (auto st = c.session().target().process().exit_status())
        c.loop.note_exit(*st);
    return command_status::ok;
}

command_status cmd_quit(command_context&, const words&, const std::string&)
{
    return command_status::quit;
}

}  // namespace tdctl::cmd
