// `locks`: per-lock contention and trylock failures from the agent's
// TD_LOCK_TRY, TD_SLEEP, TD_READY (and TD_PRI_INHERIT) reports, counted by
// events/lock_contention;
// the waiter's stack and the lock's owner are read at each report while the
// waiter is stopped (core/locks/lock_probe.hpp). Works on whatever session reports
// those events, launched with --agent or not. With --stream the agent writes
// each report, the lock's kind, its owner and the call site to its thread's
// ring and no waiter stops (core/session/event_stream.hpp): the call site is
// then the one frame of each wait.
#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "cmd/commands.hpp"
#include "cmd/lock_view.hpp"
#include "cmd/trace_output.hpp"
#include "events/event_names.hpp"
#include "events/lock_contention.hpp"

namespace tdctl::cmd {

using core::session_event;

namespace {

// The events `locks` arms; the first three are required.
constexpr td_event_e lock_events[] = {TD_LOCK_TRY, TD_SLEEP, TD_READY, TD_PRI_INHERIT};

// Frames unwound on top of DEPTH for the agent's own at the top of a lock
// wait's stack (its reporting function, tdagent_report, the lock wrapper:
// 3 or 4 today), which the session drops (core::drop_reporter_frames) before
// lock_contention keeps DEPTH of the rest.
constexpr int agent_frames = 8;

// Each TD_SLEEP of a scope carries the reporter's stack and the lock's
// owner. Only the SLEEP: its time is taken before the stack is read, so the
// unwinding falls inside the wait measured, as it does in the waiter's own
// clock; the TD_LOCK_TRY before it stays a bare stop.
class lock_probe_scope {
public:
    lock_probe_scope(core::session& s, int depth) : s_(s)
    {
        s_.stacks().set_event_stacks(depth + agent_frames, {TD_SLEEP});
        s_.stacks().set_lock_probes(true);
    }
    ~lock_probe_scope()
    {
        s_.stacks().set_event_stacks(0);
        s_.stacks().set_lock_probes(false);
    }
    lock_probe_scope(const lock_probe_scope&) = delete;
    lock_probe_scope& operator=(const lock_probe_scope&) = delete;

private:
    core::session& s_;
};

// `locks`' events: TD_LOCK_TRY, TD_SLEEP, TD_READY (and TD_PRI_INHERIT
// when reported); nullopt after the error that says the agent is needed.
std::optional<std::vector<td_event_e>> lock_watch_events(command_context& c, const std::string& where)
{
    auto* agent = c.session().target().agent();
    std::vector<td_event_e> list;
    for (td_event_e e : lock_events) {
        if (agent->reporting_address_of(e))
            list.push_back(e);
        else if (e != TD_PRI_INHERIT) {
            c.check.td_error(TD_NOEVENT,
                             fmt::format("{}: locks needs the agent's lock events ({} does not report {}); "
                                         "run the program with --agent",
                                         where, agent->backend(), events::event_name(e)));
            return std::nullopt;
        }
    }
    return list;
}

// The locks of the target's runtime that are not pthread locks, so that
// `locks` cannot see them: a JVM's monitors (libjvm.so); CPython's locks
// (semaphores; libpython, or a python executable that links it in) are seen
// only when the agent was there at their sem_init (core/locks/lock_semaphores.hpp).
std::string unseen_locks(command_context& c)
{
    const symbols::module_set& modules = c.session().target().modules();
    if (modules.find("libjvm.so") != nullptr)
        return "this is a JVM: Java monitors (synchronized, java.util.concurrent locks) are not pthread mutexes "
               "and are not counted; the JVM's own native locks are";
    const symbols::elf_module* main = modules.main_executable();
    const bool python = modules.find("libpython") != nullptr ||
                        (main != nullptr && main->path().substr(main->path().rfind('/') + 1).starts_with("python"));
    if (python)
        return "this is CPython: a threading.Lock is a semaphore, counted as a lock (holders inferred) only when "
               "it was made while the agent was loaded; the GIL is a mutex";
    return {};
}

// One `locks` report: its head and the first `top` locks.
void print_locks(command_context& c, const events::lock_contention& counts, std::size_t report, double span,
                 std::size_t top)
{
    auto locks = counts.report(locks_sites_per_lock);
    const std::size_t shown = std::min(top, locks.size());
    output::bulk batch(c.out);
    c.out.print(locks_report_record{report, span, locks.size(), shown, counts.contentions(), counts.try_failures(),
                                    seconds_since_start(), unseen_locks(c)});
    for (std::size_t i = 0; i < shown; ++i) {
        code_location where = locate(c.session(), locks[i].address);
        c.out.print(lock_record{report, i + 1, std::move(locks[i]), std::move(where)});
    }
}

// Runs the target, counting lock events into `counts`: one report at the
// end (after `for_seconds`, Ctrl-C or the exit), or one per `interval`
// each over its own interval.
void run_lock_reports(command_context& c, events::lock_contention& counts, std::optional<double> for_seconds,
                      std::optional<double> interval, std::size_t top)
{
    const double start = seconds_since_start();
    // Threads the trace has a track for: one born since the last listing
    // gets its track before its first wait (no TD_CREATE is armed here).
    std::unordered_set<pid_t> traced;
    auto count = [&](const events::event_message& msg) {
        counts.add(msg);
        if (c.trace != nullptr) {
            if (traced.insert(msg.tid.value).second)
                c.trace->observe(c.session());
            c.trace->write(msg);
        }
    };
    auto on_event = [&](const session_event& ev) {
        if (ev.what != session_event::kind::message) {
            c.loop.show(ev);
            return false;
        }
        count(ev.message);
        return false;
    };
    double span_start = start;
    for (std::size_t report = 1;; ++report) {
        std::optional<double> step = interval ? interval : for_seconds;
        if (for_seconds)
            step = std::min(step.value_or(*for_seconds), start + *for_seconds - span_start);
        auto end = c.loop.run_until(step, on_event);
        const double now = seconds_since_start();
        const bool more = end == run_end::timeout && interval && (!for_seconds || now - start < *for_seconds - 1e-3);
        // The last report: streaming ends first, and what the rings still
        // hold was written before the end.
        if (!more)
            for (const auto& msg : c.session().stream().stop())
                count(msg);
        print_locks(c, counts, report, now - span_start, top);
        if (!more)
            return;
        counts.clear();
        span_start = now;
    }
}

}  // namespace

command_status cmd_locks(command_context& c, const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{
        option_for | option_interval | option_top | option_bt | option_stream | option_stop,
        run_option_grammar::operand_kind::none, " (e.g. 5, 2.5s, 500ms)",
        "usage: locks [--for SECONDS] [--interval SECONDS] [--top N] [--bt=DEPTH] [--stream | --stop]"};
    auto options = c.check.parse_options(w, 1, grammar, where);
    if (!options || !c.check.require_agent(where))
        return command_status::failed;
    auto list = lock_watch_events(c, where);
    auto delivery = list ? c.check.choose_delivery(*options, "locks",
                                                   "--bt needs each waiter to stop: a streamed wait has its call site only",
                                                   where)
                         : std::nullopt;
    if (!delivery)
        return command_status::failed;
    if (auto r = c.session().arm(*list); !r)
        return c.check.td_error(r.error(), fmt::format("{}: locks", where));
    if (delivery->stream && !c.session().stream().start(*list)) {
        if (delivery->asked)
            return c.check.usage_error(where, "locks --stream: the agent's event rings could not be switched on");
        *delivery = {false, false, " (the agent's event rings could not be switched on)"};
    }
    c.out.note(delivery->stream ? "locks: lock events through the agent's event rings, no stop per event"
                                : fmt::format("locks: each lock event stops its thread{}", delivery->stop_reason));
    const auto top = static_cast<std::size_t>(options->top.value_or(locks_default_top));
    // Streamed, a wait's stack is its call site (a report a full ring
    // stops is cut to the same, so both count at one site).
    const auto depth = delivery->stream ? 1 : options->bt.value_or(locks_default_depth);
    events::lock_contention counts(static_cast<std::size_t>(depth));
    {
        lock_probe_scope probes(c.session(), static_cast<int>(depth));
        if (c.trace != nullptr)
            c.trace->observe(c.session());
        c.loop.let_run();
        run_lock_reports(c, counts, options->for_seconds, options->interval, top);
    }
    if (c.session().is_alive() && !c.detach_follows && !c.loop.must_exit())
        c.session().disarm();
    return command_status::ok;
}

}  // namespace tdctl::cmd
