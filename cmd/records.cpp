// The text and JSON renderings of the session, thread and event records.
#include "cmd/records.hpp"

#include <sys/wait.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "events/event_names.hpp"
#include "events/event_sink.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/wait_status.hpp"

namespace tdctl::cmd {

namespace {

// "create, death"; `empty` when the list is.
std::string join_short_names(const std::vector<td_event_e>& list, const char* empty)
{
    std::string s;
    for (td_event_e e : list)
        s += (s.empty() ? "" : ", ") + events::event_short_name(e);
    return s.empty() ? empty : s;
}

json_record event_names(const std::vector<td_event_e>& list)
{
    auto names = json_record::array();
    for (td_event_e e : list)
        names.push_back(events::event_name(e));
    return names;
}

const char* on_off(bool on) { return on ? "on" : "off"; }

}  // namespace

std::string count_of(std::size_t n, std::string_view noun)
{
    return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

library_info library_of(core::session& session)
{
    library_info lib;
    auto* agent = session.target().agent();
    if (agent == nullptr) {
        lib.backend = "none";
        lib.no_library_reason = session.target().no_agent_reason();
        return lib;
    }
    lib.found = true;
    lib.backend = agent->backend();
    lib.version = agent->layout().version;
    lib.module = agent->layout().module;
    lib.events = agent->supported_events();
    return lib;
}

// ---------------------------------------------------------------- session

json_record session_start_record::json() const
{
    json_record rec;
    rec["type"] = launched ? "launched" : "attached";
    rec["pid"] = pid;
    rec["name"] = name;
    rec["threads"] = threads;
    rec["backend"] = library.backend;
    if (library.found) {
        rec["version"] = library.version;
        rec["events"] = event_names(library.events);
    } else {
        rec["reason"] = library.no_library_reason;
    }
    if (routed)
        rec["routed"] = {{"slots", routed->slots}, {"modules", routed->modules}, {"already", routed->already}};
    rec["time"] = events::json_seconds(time);
    return rec;
}

session_start_record start_record_of(core::session& session, bool launched)
{
    std::optional<session_start_record::routing_counts> routed;
    if (const auto& r = session.routing().tally())
        routed = session_start_record::routing_counts{r->slots, r->modules, r->already};
    return {.launched = launched,
            .pid = session.target().pid(),
            .name = procfs::process_name(session.target().pid()),
            .threads = session.target().lwps().size(),
            .library = library_of(session),
            .routed = routed,
            .time = seconds_since_start()};
}

std::string session_start_record::text() const
{
    std::string lib = library.found ? fmt::format("thread library {} {} (events: {})", library.backend, library.version,
                                                  join_short_names(library.events, ""))
                                    : "no thread library: " + library.no_library_reason;
    if (routed) {
        lib += fmt::format("; {} in {} routed to the agent", count_of(routed->slots, "GOT slot"),
                           count_of(routed->modules, "module"));
        // Slots a session killed before its detach left routed.
        if (routed->already != 0)
            lib += fmt::format(" ({} routed already)", routed->already);
    }
    return fmt::format("{} process {} ({}), {}; {}", launched ? "launched" : "attached to", pid,
                       events::printable_name(name), count_of(threads, "thread"), lib);
}

json_record exit_record::json() const
{
    json_record rec;
    rec["type"] = "exit";
    rec["pid"] = pid;
    if (WIFSIGNALED(raw))
        rec["signal"] = ptrace::signal_name(WTERMSIG(raw));
    else
        rec["status"] = WEXITSTATUS(raw);
    rec["time"] = events::json_seconds(time);
    return rec;
}

std::string exit_record::text() const
{
    if (WIFSIGNALED(raw))
        return fmt::format("process {} killed by {}", pid, ptrace::signal_name(WTERMSIG(raw)));
    return fmt::format("process {} exited with status {}", pid, WEXITSTATUS(raw));
}

json_record stopped_record::json() const
{
    json_record rec;
    rec["type"] = "stopped";
    rec["event"] = events::event_name(message.event);
    rec["tid"] = message.tid.value;
    if (message.ns_tid)
        rec["ns_tid"] = *message.ns_tid;
    rec["name"] = message.name;
    rec["handle"] = events::hex_addr(message.handle.value);
    rec["time"] = events::json_seconds(message.time);
    return rec;
}

std::string stopped_record::text() const
{
    return fmt::format("stopped: LWP {} ({}) hit the {} reporting address; target held "
                       "(`event getmsg` drains, `continue` resumes)",
                       message.tid.value, events::printable_name(message.name), events::event_name(message.event));
}

json_record exec_record::json() const
{
    json_record rec;
    rec["type"] = "exec";
    rec["pid"] = pid;
    rec["name"] = name;
    rec["backend"] = backend;
    rec["time"] = events::json_seconds(time);
    return rec;
}

std::string exec_record::text() const
{
    return fmt::format("process {} exec'd {}; thread library: {}", pid, events::printable_name(name), backend);
}

json_record routing_record::json() const
{
    using core::routing_note;
    json_record rec;
    rec["type"] = "routing";
    rec["pid"] = pid;
    rec["action"] = note.what == routing_note::kind::routed     ? "routed"
                    : note.what == routing_note::kind::unloaded ? "unloaded"
                                                                : "not_routed";
    rec["module"] = note.module;
    rec["slots"] = note.slots;
    if (note.what == routing_note::kind::routed)
        rec["late"] = true;
    if (note.what == routing_note::kind::unloaded)
        rec["written_back"] = 0;
    if (!note.detail.empty())
        rec["reason"] = note.detail;
    rec["time"] = events::json_seconds(time);
    return rec;
}

std::string routing_record::text() const
{
    using core::routing_note;
    switch (note.what) {
    case routing_note::kind::routed:
        return fmt::format("agent: routed {} in {} (loaded after attach)", count_of(note.slots, "slot"), note.module);
    case routing_note::kind::unloaded:
        return fmt::format("agent: {} unloaded; its {} dropped from the journal, nothing written back into its "
                           "range",
                           note.module, count_of(note.slots, "routed slot"));
    case routing_note::kind::problem:
        break;
    }
    return fmt::format("agent: {} (loaded after attach) not routed: {}", note.module, note.detail);
}

json_record continued_record::json() const
{
    json_record rec;
    rec["type"] = "continued";
    rec["pid"] = pid;
    return rec;
}

std::string continued_record::text() const { return fmt::format("process {} continued", pid); }

json_record interrupted_record::json() const
{
    json_record rec;
    rec["type"] = "interrupted";
    rec["pid"] = pid;
    rec["threads"] = threads;
    return rec;
}

std::string interrupted_record::text() const
{
    return fmt::format("process {} stopped ({}); `continue` resumes", pid, count_of(threads, "thread"));
}

json_record detached_record::json() const
{
    json_record rec;
    rec["type"] = "detached";
    rec["pid"] = pid;
    rec["time"] = events::json_seconds(time);
    return rec;
}

std::string detached_record::text() const { return fmt::format("detached from process {}", pid); }

json_record help_record::json() const
{
    json_record rec;
    rec["type"] = "help";
    rec["text"] = text_;
    return rec;
}

// ---------------------------------------------------------------- threads

json_record process_record::json() const
{
    json_record rec;
    rec["type"] = "process";
    rec["pid"] = pid;
    if (ns_pid)
        rec["ns_pid"] = *ns_pid;
    rec["name"] = name;
    rec["threads"] = threads;
    rec["backend"] = library.backend;
    if (library.found) {
        rec["version"] = library.version;
        rec["module"] = library.module;
        rec["events"] = event_names(library.events);
    } else {
        rec["reason"] = library.no_library_reason;
    }
    return rec;
}

std::string process_record::text() const
{
    // A target in another PID namespace: its own TIDs in a column of their own.
    const std::string ns_note = ns_pid ? fmt::format("; PID namespace of its own (pid {} there)", *ns_pid) : "";
    if (library.found)
        return fmt::format("process {} ({}): {}; thread library {} {} in {} reports {}{}", pid,
                           events::printable_name(name), count_of(threads, "thread"), library.backend, library.version, library.module,
                           join_short_names(library.events, "none"), ns_note);
    return fmt::format("process {} ({}): {} (from /proc); no thread library: {}{}", pid,
                       events::printable_name(name), count_of(threads, "thread"), library.no_library_reason, ns_note);
}

namespace {

std::string thread_line(bool ns_column, const std::string& tid, const std::string& ns_tid, const std::string& name,
                        const std::string& handle, const std::string& state, const std::string& traceme,
                        const std::string& events, const std::string& start)
{
    if (ns_column)
        return fmt::format("{:>7}  {:>6}  {:<16} {:<16} {:<7} {:<7} {:<14} {}", tid, ns_tid, name, handle, state,
                           traceme, events, start);
    return fmt::format("{:>7}  {:<16} {:<16} {:<7} {:<7} {:<14} {}", tid, name, handle, state, traceme, events, start);
}

std::string start_text(const thread_row::record_info& info)
{
    if (info.startfunc == 0)
        return "-";
    if (info.startsym.empty())
        return events::hex_addr(info.startfunc);
    return fmt::format("{} ({})", events::hex_addr(info.startfunc), info.startsym);
}

}  // namespace

std::string thread_columns(bool ns_column)
{
    return thread_line(ns_column, "TID", "NS-TID", "NAME", "HANDLE", "STATE", "TRACEME", "EVENTS", "START");
}

json_record thread_row::json() const
{
    json_record rec;
    rec["type"] = "thread";
    rec["tid"] = tid ? json_record(*tid) : json_record(nullptr);
    if (ns_column)
        rec["ns_tid"] = ns_tid ? json_record(*ns_tid) : json_record(nullptr);
    rec["name"] = name;
    rec["handle"] = handle ? json_record(events::hex_addr(*handle)) : json_record(nullptr);
    rec["startfunc"] = info ? json_record(events::hex_addr(info->startfunc)) : json_record(nullptr);
    // Null for the main thread (no start routine), or no symbol there.
    rec["startsym"] = info && !info->startsym.empty() ? json_record(info->startsym) : json_record(nullptr);
    rec["state"] = state;
    rec["traceme"] = info ? json_record(info->traceme) : json_record(nullptr);
    rec["events"] = info ? json_record(info->events) : json_record(nullptr);
    return rec;
}

std::string thread_row::text() const
{
    const std::string tid_text = tid ? std::to_string(*tid) : "-";
    const std::string ns_text = ns_tid ? std::to_string(*ns_tid) : "-";
    const std::string handle_text = handle ? events::hex_addr(*handle) : "-";
    if (!info)
        return thread_line(ns_column, tid_text, ns_text, events::printable_name(name), handle_text, state, "-", "-",
                           "-");
    return thread_line(ns_column, tid_text, ns_text, events::printable_name(name), handle_text, state,
                       info->traceme ? "yes" : "no", info->events, start_text(*info));
}

// ---------------------------------------------------------------- event ...

json_record event_addr_record::json() const
{
    json_record rec;
    rec["type"] = "event_addr";
    rec["event"] = events::event_name(event);
    if (result) {
        rec["result"] = td_err_name(*result);
        rec["address"] = nullptr;
        rec["message"] = td_err_description(*result);
        return rec;
    }
    rec["notify"] = "NOTIFY_BPT";
    rec["address"] = events::hex_addr(address);
    rec["symbol"] = symbol;
    rec["breakpoint"] = step_over.has_value();
    return rec;
}

std::string event_addr_record::text() const
{
    if (result)
        return fmt::format("{:<14} {} ({})", events::event_name(event), td_err_name(*result),
                           td_err_description(*result));
    return fmt::format("{:<14} NOTIFY_BPT {} ({}){}", events::event_name(event), events::hex_addr(address), symbol,
                       step_over ? fmt::format(", breakpoint planted, step-over {}", *step_over) : "");
}

json_record mask_record::json() const
{
    json_record rec;
    rec["type"] = "mask";
    rec["scope"] = tid_word ? "thread" : "global";
    if (tid_word)
        rec["tid"] = std::stoi(*tid_word);
    rec["events"] = events;
    return rec;
}

std::string mask_record::text() const
{
    if (tid_word)
        return fmt::format("thread {} event mask: {}", *tid_word, events);
    return fmt::format("global event mask: {}", events);
}

json_record enable_record::json() const
{
    json_record rec;
    rec["type"] = "enable";
    rec["tid"] = tid;
    rec["handle"] = events::hex_addr(handle);
    rec["traceme"] = on;
    return rec;
}

std::string enable_record::text() const { return fmt::format("thread {} event reporting {}", tid, on_off(on)); }

json_record enable_count_record::json() const
{
    json_record rec;
    rec["type"] = "enable";
    rec[kind == which::ended ? "ended_threads" : "starting_threads"] = count;
    rec["traceme"] = on;
    return rec;
}

std::string enable_count_record::text() const
{
    return fmt::format("{}: event reporting {}",
                       kind == which::ended ? count_of(count, "ended thread") + " (not yet joined)"
                                            : count_of(count, "thread") + " not started yet",
                       on_off(on));
}

json_record no_message_record::json() const
{
    json_record rec;
    rec["type"] = "getmsg";
    rec["result"] = "TD_NOMSG";
    rec["message"] = td_err_description(TD_NOMSG);
    if (tid)
        rec["tid"] = *tid;
    return rec;
}

std::string no_message_record::text() const { return fmt::format("TD_NOMSG: {}", td_err_description(TD_NOMSG)); }

json_record watch_end_record::json() const
{
    json_record rec;
    rec["type"] = "watch_end";
    rec["messages"] = messages;
    rec["reason"] = reason;
    rec["time"] = events::json_seconds(time);
    return rec;
}

std::string watch_end_record::text() const
{
    return fmt::format("watch: {} ({})", count_of(messages, "message"), reason);
}

json_record lost_record::json() const
{
    json_record rec;
    rec["type"] = "lost";
    rec["tid"] = tid;
    rec["count"] = count;
    return rec;
}

std::string lost_record::text() const
{
    return fmt::format("lost: {} of thread {} (its ring was full)", count_of(static_cast<std::size_t>(count), "event"),
                       tid);
}

// ---------------------------------------------------------------- bt

json_record backtrace_record::json() const
{
    json_record rec;
    rec["type"] = "backtrace";
    rec["tid"] = tid;
    rec["name"] = name;
    json_record list = json_record::array();
    for (const auto& f : frames)
        list.push_back(events::frame_to_json(f));
    rec["frames"] = list;
    return rec;
}

std::string backtrace_record::text() const
{
    std::string text = fmt::format("Thread {} ({}):", tid, events::printable_name(name));
    int n = 0;
    for (const auto& f : frames)
        text += "\n" + events::format_frame_text(n++, f);
    return text;
}

json_record bt_skipped_record::json() const
{
    json_record rec;
    rec["type"] = "bt_skipped";
    rec["count"] = tids.size();
    rec["tids"] = tids;
    rec["reason"] = "ended";
    return rec;
}

std::string bt_skipped_record::text() const
{
    std::string list;
    for (pid_t tid : tids)
        list += fmt::format("{}{}", list.empty() ? "" : ", ", tid);
    return fmt::format("bt: {} skipped: ended before their stacks were read ({})", count_of(tids.size(), "thread"),
                       list);
}

}  // namespace tdctl::cmd
