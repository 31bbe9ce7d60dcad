#include "cmd/runner.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <map>
#include <poll.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "cmd/command_line.hpp"
#include "core/backtrace.hpp"
#include "core/thread_list.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/wait_status.hpp"
#include "ptrace/waiter.hpp"

namespace tdctl::cmd {

using core::session_event;
using events::json_record;

namespace {

std::string state_name(td_thr_state_e s)
{
    switch (s) {
    case TD_THR_ACTIVE: return "active";
    case TD_THR_ZOMBIE: return "zombie";
    case TD_THR_SLEEP: return "sleep";
    case TD_THR_RUN: return "run";
    case TD_THR_STOPPED: return "stopped";
    case TD_THR_STOPPED_ASLEEP: return "stopped-asleep";
    default: return "unknown";
    }
}

std::string join_events(const std::vector<td_event_e>& list)
{
    std::string s;
    for (td_event_e e : list)
        s += (s.empty() ? "" : ", ") + events::event_short_name(e);
    return s.empty() ? "none" : s;
}

// Holds every thread of the target for the guard's lifetime (unless it was
// held already): lists and buffers in target memory are read and edited
// while no thread can change them.
class target_hold {
public:
    explicit target_hold(core::session& s) : s_(s), was_held_(s.is_held())
    {
        if (!was_held_ && s_.is_alive())
            s_.interrupt();
    }
    ~target_hold()
    {
        if (!was_held_ && s_.is_alive())
            s_.resume();
    }
    target_hold(const target_hold&) = delete;
    target_hold& operator=(const target_hold&) = delete;

private:
    core::session& s_;
    bool was_held_;
};

}  // namespace

runner::runner(core::session& session, output& out, signal_source& signals)
    : session_(session), out_(out), signals_(signals)
{
}

bool runner::has_target() const
{
    return !detached_ && !exit_status_ && session_.is_alive();
}

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
    out_.error("no-target", fmt::format("{}: {}", where, why));
    return false;
}

bool runner::require_agent(const std::string& where)
{
    if (!require_target(where))
        return false;
    if (session_.agent() != nullptr)
        return true;
    out_.error("TD_NOLIBTHREAD", fmt::format("{}: TD_NOLIBTHREAD ({}): {}", where, td_err_description(TD_NOLIBTHREAD),
                                             session_.no_agent_reason()));
    return false;
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

std::optional<core::thread_handle> runner::handle_for(const std::string& tid_text, const std::string& where)
{
    auto tid = parse_count(tid_text);
    if (!tid || *tid == 0 || *tid > 0x7fffffff) {
        usage_error(where, fmt::format("'{}' is not a thread ID (a TID from `threads`)", tid_text));
        return std::nullopt;
    }
    auto th = session_.agent()->map_lwp2thr(tid_t{static_cast<pid_t>(*tid)});
    if (!th) {
        td_error(th.error(), fmt::format("{}: thread {}", where, *tid));
        return std::nullopt;
    }
    return *th;
}

void runner::print_exit(int raw)
{
    json_record rec;
    rec["type"] = "exit";
    rec["pid"] = session_.pid();
    std::string text;
    if (WIFSIGNALED(raw)) {
        rec["signal"] = ptrace::signal_name(WTERMSIG(raw));
        text = fmt::format("process {} killed by {}", session_.pid(), ptrace::signal_name(WTERMSIG(raw)));
    } else {
        rec["status"] = WEXITSTATUS(raw);
        text = fmt::format("process {} exited with status {}", session_.pid(), WEXITSTATUS(raw));
    }
    rec["time"] = events::json_seconds(seconds_since_start());
    out_.record(rec, text);
}

void runner::show(const session_event& ev)
{
    switch (ev.what) {
    case session_event::kind::message:
        out_.event(ev.message);
        break;
    case session_event::kind::stopped_at_event: {
        json_record rec;
        rec["type"] = "stopped";
        rec["event"] = events::event_name(ev.message.event);
        rec["tid"] = ev.message.tid.value;
        if (ev.message.ns_tid)
            rec["ns_tid"] = *ev.message.ns_tid;
        rec["name"] = ev.message.name;
        rec["handle"] = events::hex_addr(ev.message.handle.value);
        rec["time"] = events::json_seconds(ev.message.time);
        out_.record(rec, fmt::format("stopped: LWP {} ({}) hit the {} reporting address; target held "
                                     "(`event getmsg` drains, `continue` resumes)",
                                     ev.message.tid.value, events::printable_name(ev.message.name),
                                     events::event_name(ev.message.event)));
        break;
    }
    case session_event::kind::process_exited:
        exit_status_ = ev.status;
        print_exit(ev.status);
        break;
    case session_event::kind::exec: {
        json_record rec;
        rec["type"] = "exec";
        rec["pid"] = session_.pid();
        rec["name"] = ev.message.name;
        rec["backend"] = session_.agent() ? session_.agent()->backend() : std::string("none");
        rec["time"] = events::json_seconds(ev.message.time);
        out_.record(rec, fmt::format("process {} exec'd {}; thread library: {}", session_.pid(),
                                     events::printable_name(ev.message.name),
                                     session_.agent() ? session_.agent()->backend() : "none"));
        break;
    }
    }
}

run_end runner::run_until(std::optional<double> seconds,
                          const std::function<bool(const session_event&)>& on_event)
{
    using clock = std::chrono::steady_clock;
    std::optional<clock::time_point> deadline;
    if (seconds)
        deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(*seconds));
    last_signal_ = 0;
    for (;;) {
        if (!session_.is_alive())
            return exit_status_ ? run_end::exited : run_end::detached;
        if (!out_.ok()) {
            // Nobody can read what happens next: end as SIGTERM would.
            must_exit_ = true;
            return run_end::signal;
        }
        // Handle what is already pending before sleeping in poll().
        for (const auto& ev : session_.pump(0)) {
            bool done = on_event(ev);
            if (ev.what == session_event::kind::process_exited)
                return run_end::exited;
            if (done)
                return run_end::done;
        }
        if (int sig = signals_.take(); sig != 0) {
            last_signal_ = sig;
            if (sig != SIGINT)
                must_exit_ = true;
            return run_end::signal;
        }
        int wait_ms = -1;
        if (deadline) {
            auto left = std::chrono::duration_cast<std::chrono::microseconds>(*deadline - clock::now()).count();
            if (left <= 0)
                return run_end::timeout;
            // Round up: poll() must not return before the deadline.
            wait_ms = static_cast<int>(std::min<long long>((left + 999) / 1000, 1000 * 60 * 60));
        }
        if (session_.has_pending())
            wait_ms = 0;
        // Stops are looked for again at least this often, SIGCHLD or not.
        if (wait_ms < 0 || wait_ms > ptrace::waiter::repoll_ms)
            wait_ms = ptrace::waiter::repoll_ms;
        pollfd fds[2] = {{session_.wait_fd(), POLLIN, 0}, {signals_.fd(), POLLIN, 0}};
        ::poll(fds, 2, wait_ms);
    }
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
        for (const auto& ev : session_.pump(0))
            show(ev);
    }
    // The exit may have been taken while the session held the target for
    // some edit; report it once here.
    if (!exit_status_ && !detached_ && !session_.is_alive())
        if (auto st = session_.process().exit_status()) {
            exit_status_ = *st;
            print_exit(*st);
        }
}

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
    try {
        return dispatch(*w, where);
    } catch (const error& e) {
        out_.error(e.domain() == error_domain::td ? td_err_name(static_cast<td_err_e>(e.code())) : "error",
                   fmt::format("{}: {}", where, e.what()));
        return command_status::failed;
    }
}

command_status runner::dispatch(const words& w, const std::string& where)
{
    const std::string& c = w[0];
    if (c == "threads" || c == "info-threads")
        return cmd_threads(w, where);
    if (c == "event")
        return cmd_event(w, where);
    if (c == "stop")
        return cmd_stop(w, where);
    if (c == "watch")
        return cmd_watch(w, where);
    if (c == "sleep")
        return cmd_sleep(w, where);
    if (c == "continue" || c == "c" || c == "cont")
        return cmd_continue(w, where);
    if (c == "interrupt")
        return cmd_interrupt(w, where);
    if (c == "detach")
        return cmd_detach(w, where);
    if (c == "kill")
        return cmd_kill(w, where);
    if (c == "help" || c == "?")
        return cmd_help(w, where);
    if (c == "stats")
        return cmd_stats(w, where);
    if (c == "rusage")
        return cmd_rusage(w, where);
    if (c == "lwpinfo")
        return cmd_lwpinfo(w, where);
    if (c == "bt" || c == "backtrace")
        return cmd_bt(w, where);
    if (c == "quit" || c == "q" || c == "exit")
        return command_status::quit;
    return usage_error(where, fmt::format("unknown command '{}'; expected one of: threads, event, stop, watch, "
                                          "stats, rusage, lwpinfo, bt, sleep, continue, interrupt, detach, kill, quit, help",
                                          c));
}

// ---------------------------------------------------------------- threads

command_status runner::cmd_threads(const words& w, const std::string& where)
{
    if (w.size() > 1)
        return usage_error(where, "usage: threads");
    if (!require_target(where))
        return command_status::failed;

    target_hold hold(session_);
    auto* agent = session_.agent();
    auto rows = core::list_threads(session_, agent);
    if (!rows)
        return td_error(rows.error(), fmt::format("{}: threads", where));
    // A target in another PID namespace: its own TIDs in a column of their own.
    const auto ns_pid = session_.ns_pid();
    const std::string ns_note = ns_pid ? fmt::format("; PID namespace of its own (pid {} there)", *ns_pid) : "";

    std::string header;
    if (agent != nullptr) {
        header = fmt::format("process {} ({}): {} threads; thread library {} {} in {} reports {}{}", session_.pid(),
                             events::printable_name(procfs::process_name(session_.pid())), rows->size(),
                             agent->backend(), agent->layout().version, agent->layout().module,
                             join_events(agent->supported_events()), ns_note);
    } else {
        header = fmt::format("process {} ({}): {} threads (from /proc); no thread library: {}{}", session_.pid(),
                             events::printable_name(procfs::process_name(session_.pid())), rows->size(),
                             session_.no_agent_reason(), ns_note);
    }
    auto line = [&](const std::string& tid, const std::string& ns_tid, const std::string& name,
                    const std::string& handle, const std::string& state, const std::string& traceme,
                    const std::string& events, const std::string& start) {
        if (ns_pid)
            return fmt::format("{:>7}  {:>6}  {:<16} {:<16} {:<7} {:<7} {:<14} {}", tid, ns_tid, name, handle, state,
                               traceme, events, start);
        return fmt::format("{:>7}  {:<16} {:<16} {:<7} {:<7} {:<14} {}", tid, name, handle, state, traceme, events,
                           start);
    };
    if (!out_.is_json()) {
        out_.record({}, header);
        out_.record({}, line("TID", "NS-TID", "NAME", "HANDLE", "STATE", "TRACEME", "EVENTS", "START"));
    } else {
        json_record rec;
        rec["type"] = "process";
        rec["pid"] = session_.pid();
        if (ns_pid)
            rec["ns_pid"] = *ns_pid;
        rec["name"] = procfs::process_name(session_.pid());
        rec["threads"] = rows->size();
        rec["backend"] = agent ? agent->backend() : std::string("none");
        if (agent) {
            rec["version"] = agent->layout().version;
            rec["module"] = agent->layout().module;
            std::vector<std::string> ev;
            for (td_event_e e : agent->supported_events())
                ev.push_back(events::event_name(e));
            rec["events"] = ev;
        } else {
            rec["reason"] = session_.no_agent_reason();
        }
        out_.record(rec, "");
    }

    for (const auto& r : *rows) {
        using kind = core::thread_entry_kind;
        const bool has_lwp = r.lwp.value != 0;
        // Names come from /proc/PID/task/TID/comm, so only an LWP has one.
        std::string name = has_lwp ? session_.thread_name(r.lwp) : std::string();
        std::string state = r.kind == kind::ended      ? "zombie"
                            : r.kind == kind::starting ? "starting"
                            : r.kind == kind::lwp_only ? "lwp"
                            : r.info                   ? state_name(r.info->ti_state)
                                                       : "unknown";
        json_record rec;
        rec["type"] = "thread";
        rec["tid"] = has_lwp ? json_record(r.lwp.value) : json_record(nullptr);
        if (ns_pid)
            rec["ns_tid"] = r.ns_tid ? json_record(*r.ns_tid) : json_record(nullptr);
        rec["name"] = name;
        std::string tid_text = has_lwp ? std::to_string(r.lwp.value) : "-";
        std::string ns_text = r.ns_tid ? std::to_string(*r.ns_tid) : "-";
        if (r.has_record && r.info) {
            auto start = reinterpret_cast<std::uint64_t>(r.info->ti_startfunc);
            std::string sym = start ? session_.modules().describe(target_addr{start}) : std::string();
            rec["handle"] = events::hex_addr(r.handle.value);
            rec["startfunc"] = events::hex_addr(start);
            if (sym.empty())
                rec["startsym"] = nullptr;   // the main thread (no start routine), or no symbol there
            else
                rec["startsym"] = sym;
            rec["state"] = state;
            rec["traceme"] = r.info->ti_traceme != 0;
            rec["events"] = events::format_event_set(r.info->ti_events);
            std::string start_text = start == 0 ? "-" : sym.empty() ? events::hex_addr(start)
                                                                    : fmt::format("{} ({})", events::hex_addr(start), sym);
            out_.record(rec, line(tid_text, ns_text, events::printable_name(name), events::hex_addr(r.handle.value),
                                  state, r.info->ti_traceme ? "yes" : "no",
                                  events::format_event_set(r.info->ti_events), start_text));
        } else {
            // An LWP without a record, or a record that cannot be read.
            rec["handle"] = r.has_record ? json_record(events::hex_addr(r.handle.value)) : json_record(nullptr);
            rec["startfunc"] = nullptr;
            rec["startsym"] = nullptr;
            rec["state"] = state;
            rec["traceme"] = nullptr;
            rec["events"] = nullptr;
            out_.record(rec, line(tid_text, ns_text, events::printable_name(name),
                                  r.has_record ? events::hex_addr(r.handle.value) : "-", state, "-", "-", "-"));
        }
    }
    return command_status::ok;
}

// ---------------------------------------------------------------- event ...

command_status runner::cmd_event(const words& w, const std::string& where)
{
    if (w.size() < 2)
        return usage_error(where, "usage: event addr|set|clear|enable|getmsg ... (see `help event`)");
    const std::string& sub = w[1];
    if (sub == "addr")
        return cmd_event_addr(w, where);
    if (sub == "set")
        return cmd_event_mask(w, where, true);
    if (sub == "clear")
        return cmd_event_mask(w, where, false);
    if (sub == "enable")
        return cmd_event_enable(w, where);
    if (sub == "getmsg")
        return cmd_event_getmsg(w, where);
    return usage_error(where, fmt::format("unknown subcommand 'event {}'; expected addr, set, clear, enable or getmsg", sub));
}

command_status runner::cmd_event_addr(const words& w, const std::string& where)
{
    if (w.size() != 3)
        return usage_error(where, "usage: event addr EVENTS");
    auto list = parse_events(w[2], where);
    if (!list)
        return command_status::failed;
    if (!require_agent(where))
        return command_status::failed;
    command_status status = command_status::ok;
    for (td_event_e e : *list) {
        auto addr = session_.agent()->reporting_address_of(e);
        if (!addr) {
            td_error(addr.error(), fmt::format("{}: event addr {}", where, events::event_name(e)));
            status = command_status::failed;
            continue;
        }
        const auto* site = session_.process().site_at(addr->address);
        json_record rec;
        rec["type"] = "event_addr";
        rec["event"] = events::event_name(e);
        rec["notify"] = "NOTIFY_BPT";
        rec["address"] = events::hex_addr(addr->address.value);
        rec["symbol"] = addr->symbol;
        rec["breakpoint"] = site != nullptr;
        out_.record(rec, fmt::format("{:<14} NOTIFY_BPT {} ({}){}", events::event_name(e),
                                     events::hex_addr(addr->address.value), addr->symbol,
                                     site ? fmt::format(", breakpoint planted, step-over {}",
                                                        ptrace::step_over_name(site->kind()))
                                          : ""));
    }
    return status;
}

command_status runner::cmd_event_mask(const words& w, const std::string& where, bool set)
{
    const char* verb = set ? "set" : "clear";
    if (w.size() != 3 && w.size() != 4)
        return usage_error(where, fmt::format("usage: event {} EVENTS [TID]", verb));
    auto list = parse_events(w[2], where);
    if (!list)
        return command_status::failed;
    if (!require_agent(where))
        return command_status::failed;
    auto mask = events::to_event_set(*list);
    target_hold hold(session_);
    json_record rec;
    rec["type"] = "mask";
    if (w.size() == 4) {
        auto th = handle_for(w[3], where);
        if (!th)
            return command_status::failed;
        auto r = set ? session_.thr_set_event(*th, mask) : session_.thr_clear_event(*th, mask);
        if (!r)
            return td_error(r.error(), fmt::format("{}: event {} {} {}", where, verb, w[2], w[3]));
        auto info = th->get_info();
        std::string now = info ? events::format_event_set(info->ti_events) : "?";
        rec["scope"] = "thread";
        rec["tid"] = std::stoi(w[3]);
        rec["events"] = now;
        out_.record(rec, fmt::format("thread {} event mask: {}", w[3], now));
        return command_status::ok;
    }
    auto r = set ? session_.ta_set_event(mask) : session_.ta_clear_event(mask);
    if (!r)
        return td_error(r.error(), fmt::format("{}: event {} {}", where, verb, w[2]));
    auto now = session_.agent()->global_mask();
    std::string text = now ? events::format_event_set(*now) : "?";
    rec["scope"] = "global";
    rec["events"] = text;
    out_.record(rec, fmt::format("global event mask: {}", text));
    return command_status::ok;
}

command_status runner::cmd_event_enable(const words& w, const std::string& where)
{
    if (w.size() != 3 && w.size() != 4)
        return usage_error(where, "usage: event enable on|off [TID|all]");
    bool on;
    if (w[2] == "on" || w[2] == "1")
        on = true;
    else if (w[2] == "off" || w[2] == "0")
        on = false;
    else
        return usage_error(where, fmt::format("expected on or off, got '{}'", w[2]));
    if (!require_agent(where))
        return command_status::failed;
    target_hold hold(session_);
    std::vector<core::thread_handle> targets;
    if (w.size() == 4 && w[3] != "all") {
        auto th = handle_for(w[3], where);
        if (!th)
            return command_status::failed;
        targets.push_back(*th);
    } else {
        auto list = session_.agent()->thr_iter();
        if (!list)
            return td_error(list.error(), fmt::format("{}: event enable", where));
        targets = *list;
    }
    // Listed one line per LWP; records no LWP runs are counted (there may be
    // thousands on a thread storm), never shown under the process ID.
    std::size_t ended = 0, starting = 0;
    for (const auto& th : targets) {
        auto r = session_.thr_event_enable(th, on);
        if (!r)
            return td_error(r.error(), fmt::format("{}: event enable {}", where, w[2]));
        auto info = th.get_info();
        auto lwp = th.lwp();
        const bool has_lwp = lwp && *lwp;
        if (targets.size() > 1 && info && (!has_lwp || info->ti_state != TD_THR_ACTIVE)) {
            if (!has_lwp && info->ti_state == TD_THR_ACTIVE)
                ++starting;   // set up, not cloned yet
            else
                ++ended;      // ended (or ending), not yet joined
            continue;
        }
        json_record rec;
        rec["type"] = "enable";
        rec["tid"] = info ? info->ti_lid : 0;
        rec["handle"] = events::hex_addr(th.value().value);
        rec["traceme"] = on;
        out_.record(rec, fmt::format("thread {} event reporting {}", info ? info->ti_lid : 0, on ? "on" : "off"));
    }
    if (ended != 0) {
        json_record rec;
        rec["type"] = "enable";
        rec["ended_threads"] = ended;
        rec["traceme"] = on;
        out_.record(rec, fmt::format("{} ended threads (not yet joined): event reporting {}", ended, on ? "on" : "off"));
    }
    if (starting != 0) {
        json_record rec;
        rec["type"] = "enable";
        rec["starting_threads"] = starting;
        rec["traceme"] = on;
        out_.record(rec, fmt::format("{} threads not started yet: event reporting {}", starting, on ? "on" : "off"));
    }
    return command_status::ok;
}

command_status runner::cmd_event_getmsg(const words& w, const std::string& where)
{
    if (w.size() != 2 && w.size() != 3)
        return usage_error(where, "usage: event getmsg [TID]");
    if (!require_agent(where))
        return command_status::failed;
    std::optional<core::thread_handle> th;
    if (w.size() == 3) {
        th = handle_for(w[2], where);
        if (!th)
            return command_status::failed;
    }
    // The message list is edited in place: no thread may push meanwhile.
    auto msg = [&] {
        target_hold hold(session_);
        return th ? th->event_getmsg() : session_.agent()->event_getmsg();
    }();
    if (!msg) {
        if (msg.error() == TD_NOMSG) {
            // An expected outcome, not a failure.
            json_record rec;
            rec["type"] = "getmsg";
            rec["result"] = "TD_NOMSG";
            rec["message"] = td_err_description(TD_NOMSG);
            if (th)
                rec["tid"] = std::stoi(w[2]);
            out_.record(rec, fmt::format("TD_NOMSG: {}", td_err_description(TD_NOMSG)));
            return command_status::ok;
        }
        return td_error(msg.error(), fmt::format("{}: event getmsg", where));
    }
    events::event_message m;
    m.event = msg->event;
    m.handle = msg->handle;
    m.data = msg->data;
    m.tid = session_.lwp_of(msg->handle);
    m.ns_tid = session_.foreign_ns_tid(m.tid);
    m.name = m.tid.value ? session_.thread_name(m.tid) : std::string();
    m.time = seconds_since_start();
    out_.event(m);
    return command_status::ok;
}

// ---------------------------------------------------------------- stop / watch / sleep

command_status runner::cmd_stop(const words& w, const std::string& where)
{
    std::optional<double> seconds;
    std::string event_text;
    for (std::size_t i = 1; i < w.size(); ++i) {
        if (w[i] == "--for" && i + 1 < w.size()) {
            seconds = parse_duration(w[++i]);
            if (!seconds)
                return usage_error(where, fmt::format("bad duration '{}'", w[i]));
        } else if (event_text.empty()) {
            event_text = w[i];
        } else {
            return usage_error(where, "usage: stop EVENTS [--for SECONDS]");
        }
    }
    if (event_text.empty())
        return usage_error(where, "usage: stop EVENTS [--for SECONDS]");
    auto list = parse_events(event_text, where);
    if (!list)
        return command_status::failed;
    if (!require_agent(where))
        return command_status::failed;
    if (auto r = session_.plant_stops(*list); !r)
        return td_error(r.error(), fmt::format("{}: stop {}", where, event_text));

    // A hint when nothing can report: the seed's flow needs the mask and the
    // enable flag set first.
    if (auto g = session_.agent()->global_mask()) {
        std::vector<td_event_e> missing;
        for (td_event_e e : *list)
            if (!events::td_eventismember(*g, e))
                missing.push_back(e);
        if (!missing.empty())
            out_.note(fmt::format("note: {} not in the global event mask; threads report only what their mask or "
                                  "the global mask holds (`event set {}`, `event enable on all`)",
                                  join_events(missing), join_events(missing)));
    }
    if (session_.is_held())
        session_.resume();
    bool stopped = false;
    auto end = run_until(seconds, [&](const session_event& ev) {
        show(ev);
        if (ev.what == session_event::kind::stopped_at_event) {
            stopped = true;
            return true;
        }
        return false;
    });
    if (!stopped && session_.is_alive()) {
        session_.clear_stops();
        if (end == run_end::timeout)
            out_.note(fmt::format("no {} within {} s", join_events(*list), *seconds));
        else if (end == run_end::signal)
            out_.note("interrupted");
    }
    return command_status::ok;
}

command_status runner::cmd_watch(const words& w, const std::string& where)
{
    std::optional<double> seconds;
    std::optional<long long> count;
    std::string event_text;
    for (std::size_t i = 1; i < w.size(); ++i) {
        if (w[i] == "--for" && i + 1 < w.size()) {
            seconds = parse_duration(w[++i]);
            if (!seconds)
                return usage_error(where, fmt::format("bad duration '{}' (e.g. 5, 2.5s, 500ms)", w[i]));
        } else if (w[i] == "--count" && i + 1 < w.size()) {
            count = parse_count(w[++i]);
            if (!count || *count == 0)
                return usage_error(where, fmt::format("bad count '{}'", w[i]));
        } else if (event_text.empty() && !w[i].starts_with("--")) {
            event_text = w[i];
        } else {
            return usage_error(where, "usage: watch [EVENTS] [--count N] [--for SECONDS]");
        }
    }
    if (!require_agent(where))
        return command_status::failed;
    auto* agent = session_.agent();
    std::vector<td_event_e> list = agent->supported_events();
    if (!event_text.empty()) {
        auto parsed = parse_events(event_text, where);
        if (!parsed)
            return command_status::failed;
        if (event_text == "all") {
            std::vector<td_event_e> unsupported;
            for (td_event_e e : *parsed)
                if (!agent->reporting_address_of(e))
                    unsupported.push_back(e);
            if (!unsupported.empty())
                out_.note(fmt::format("note: {} reports only {}", agent->backend(), join_events(list)));
        } else {
            for (td_event_e e : *parsed)
                if (!agent->reporting_address_of(e))
                    return td_error(TD_NOEVENT, fmt::format("{}: watch {} ({} does not report {})", where,
                                                            event_text, agent->backend(), events::event_name(e)));
            list = *parsed;
        }
    }
    if (auto r = session_.arm(list); !r)
        return td_error(r.error(), fmt::format("{}: watch", where));
    if (session_.is_held())
        session_.resume();

    long long seen = 0;
    auto end = run_until(seconds, [&](const session_event& ev) {
        if (ev.what == session_event::kind::message) {
            out_.event(ev.message);
            ++seen;
            return count && seen >= *count;
        }
        show(ev);
        return false;
    });
    if (session_.is_alive())
        session_.disarm();
    const char* reason = end == run_end::done      ? "count"
                         : end == run_end::timeout ? "duration"
                         : end == run_end::signal  ? "signal"
                         : end == run_end::exited  ? "exit"
                                                   : "detached";
    json_record rec;
    rec["type"] = "watch_end";
    rec["messages"] = seen;
    rec["reason"] = reason;
    rec["time"] = events::json_seconds(seconds_since_start());
    out_.record(rec, fmt::format("watch: {} messages ({})", seen, reason));
    return command_status::ok;
}

command_status runner::watch_until_exit()
{
    return cmd_watch({"watch"}, "watch");
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
    if (has_target() && session_.is_held())
        session_.resume();
    if (!has_target()) {
        // Nothing to service: just wait, still interruptible.
        pollfd p{signals_.fd(), POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(*seconds * 1000));
        if (int sig = signals_.take(); sig != 0) {
            last_signal_ = sig;
            must_exit_ = sig != SIGINT;
        }
        return command_status::ok;
    }
    run_until(seconds, [&](const session_event& ev) {
        show(ev);
        return false;
    });
    return command_status::ok;
}

// ---------------------------------------------------------------- run control

command_status runner::cmd_continue(const words& w, const std::string& where)
{
    if (w.size() != 1)
        return usage_error(where, "usage: continue");
    if (!require_target(where))
        return command_status::failed;
    if (!session_.is_held()) {
        out_.note("the target is already running");
        return command_status::ok;
    }
    session_.resume();
    json_record rec;
    rec["type"] = "continued";
    rec["pid"] = session_.pid();
    out_.record(rec, fmt::format("process {} continued", session_.pid()));
    return command_status::ok;
}

command_status runner::cmd_interrupt(const words& w, const std::string& where)
{
    if (w.size() != 1)
        return usage_error(where, "usage: interrupt");
    if (!require_target(where))
        return command_status::failed;
    session_.interrupt();
    json_record rec;
    rec["type"] = "interrupted";
    rec["pid"] = session_.pid();
    rec["threads"] = session_.lwps().size();
    out_.record(rec, fmt::format("process {} stopped ({} threads); `continue` resumes", session_.pid(),
                                 session_.lwps().size()));
    return command_status::ok;
}

command_status runner::cmd_detach(const words& w, const std::string& where)
{
    if (w.size() != 1)
        return usage_error(where, "usage: detach");
    if (!require_target(where))
        return command_status::failed;
    session_.detach();
    detached_ = true;
    json_record rec;
    rec["type"] = "detached";
    rec["pid"] = session_.pid();
    rec["time"] = events::json_seconds(seconds_since_start());
    out_.record(rec, fmt::format("detached from process {}", session_.pid()));
    return command_status::ok;
}

command_status runner::cmd_kill(const words& w, const std::string& where)
{
    if (w.size() != 1)
        return usage_error(where, "usage: kill");
    if (!require_target(where))
        return command_status::failed;
    session_.kill();
    if (auto st = session_.process().exit_status()) {
        exit_status_ = *st;
        print_exit(*st);
    }
    return command_status::ok;
}

command_status runner::cmd_bt(const words& w, const std::string& where)
{
    if (w.size() > 2)
        return usage_error(where, "usage: bt [TID|all]");
    if (!require_target(where))
        return command_status::failed;
    std::vector<tid_t> lwps;
    if (w.size() == 2 && w[1] != "all") {
        auto tid = parse_count(w[1]);
        if (!tid || *tid == 0 || *tid > 0x7fffffff)
            return usage_error(where, fmt::format("'{}' is not a thread ID (a TID from `threads`) or all", w[1]));
        lwps.push_back(tid_t{static_cast<pid_t>(*tid)});
    }
    // Unwinding reads registers: every LWP must be in a ptrace-stop.
    target_hold hold(session_);
    if (lwps.empty())
        lwps = session_.lwps();
    command_status status = command_status::ok;
    for (tid_t t : lwps) {
        if (session_.process().find(t) == nullptr) {
            out_.error("ESRCH", fmt::format("{}: bt {}: no thread {} in process {}", where, t.value, t.value,
                                            session_.pid()));
            status = command_status::failed;
            continue;
        }
        std::string name = session_.thread_name(t);
        auto frames = core::unwind_lwp(session_.pid(), t);
        json_record rec;
        rec["type"] = "backtrace";
        rec["tid"] = t.value;
        rec["name"] = name;
        if (!frames) {
            out_.error("unwind", fmt::format("{}: bt {}: {}", where, t.value, frames.error()));
            status = command_status::failed;
            continue;
        }
        json_record list = json_record::array();
        std::string text = fmt::format("Thread {} ({}):", t.value, events::printable_name(name));
        int n = 0;
        for (const auto& f : *frames) {
            json_record jf;
            jf["pc"] = events::hex_addr(f.pc.value);
            jf["function"] = f.function.empty() ? json_record(nullptr) : json_record(f.function);
            jf["offset"] = events::hex_addr(f.offset);
            jf["module"] = f.module;
            list.push_back(jf);
            text += fmt::format("\n  #{:<3} {} in {}{} ({})", n++, events::hex_addr(f.pc.value),
                                f.function.empty() ? std::string("??") : f.function,
                                f.function.empty() ? std::string() : fmt::format("+{:#x}", f.offset),
                                f.module.empty() ? std::string("?") : f.module);
        }
        rec["frames"] = list;
        out_.record(rec, text);
    }
    return status;
}

command_status runner::cmd_help(const words& w, const std::string& where)
{
    // `help event set` is the help of `event`: commands have one help text each.
    std::string text = help_text(w.size() >= 2 ? w[1] : "");
    if (text.empty())
        return usage_error(where, fmt::format("no help for '{}'", w[1]));
    if (out_.is_json()) {
        json_record rec;
        rec["type"] = "help";
        rec["text"] = text;
        out_.record(rec, "");
    } else {
        out_.record({}, text);
    }
    return command_status::ok;
}

}  // namespace tdctl::cmd
