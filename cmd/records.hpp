// The records tdctl's commands print. A command gathers its records first
// (plain values, no session inside), then prints them; each record has two
// renderings of the same fields, a text line (or block) and a JSON object
// (records.cpp, records_usage.cpp), so that --json and the text say the same.
// Times are seconds since tdctl started (base/clock.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <vector>

#include <thread_db.h>

#include "core/stacks/backtrace.hpp"
#include "core/locks/deadlock_scan.hpp"
#include "core/session/session.hpp"
#include "events/event_message.hpp"
#include "events/json_format.hpp"

namespace tdctl::cmd {

using events::json_record;

/// The thread library tdctl found in the target, as records name it.
struct library_info {
    bool found = false;
    std::string backend;                ///< "nptl", "tdagent"; "none" when !found
    std::string version;                ///< the library's version string ("2.36")
    std::string module;                 ///< the module that publishes it ("libc.so.6")
    std::vector<td_event_e> events;     ///< the events it reports, in numeric order
    std::string no_library_reason;      ///< why there is none (when !found)
};

/// What the session knows of its thread library now.
library_info library_of(core::session& session);

/// "1 thread", "3 threads": a count with its noun (plural by adding "s").
std::string count_of(std::size_t n, std::string_view noun);

/// "attached to process ..." / "launched process ...": the first record.
struct session_start_record {
    bool launched = false;
    pid_t pid = 0;
    std::string name;            ///< /proc/PID/comm
    std::size_t threads = 0;     ///< LWPs at the start
    library_info library;
    /// An attach with --agent: GOT slots routed to the agent, in how many
    /// modules, and slots that pointed at it already (core::routing_tally).
    struct routing_counts {
        std::size_t slots = 0, modules = 0, already = 0;
    };
    std::optional<routing_counts> routed;
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// The start record of a session that has just attached or launched.
session_start_record start_record_of(core::session& session, bool launched);

/// The target ended: `raw` is its wait status (exit code or killing signal).
struct exit_record {
    pid_t pid = 0;
    int raw = 0;
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// A `stop` breakpoint was hit: the LWP that hit it and the event's address.
struct stopped_record {
    events::event_message message;   ///< event, tid, ns_tid, name, handle and time of the hit
    json_record json() const;
    std::string text() const;
};

/// The target exec'd another program; `backend` is the thread library found
/// in it ("none" without one).
struct exec_record {
    pid_t pid = 0;
    std::string name;
    std::string backend;
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// Late routing after an attach with --agent (core::routing_note): a module
/// loaded after the attach routed, a routed module unloaded, or a module
/// that could not be routed.
struct routing_record {
    pid_t pid = 0;
    core::routing_note note;
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// `threads`: the process line above the table.
struct process_record {
    pid_t pid = 0;
    std::optional<pid_t> ns_pid;   ///< the PID in the target's own PID namespace, when not ours
    std::string name;
    std::size_t threads = 0;       ///< rows in the table
    library_info library;
    json_record json() const;
    std::string text() const;
};

/// `threads`: one row. Text columns: TID [NS-TID] NAME HANDLE STATE TRACEME EVENTS START.
struct thread_row {
    /// What a readable record of the thread library adds.
    struct record_info {
        std::uint64_t startfunc = 0;   ///< start routine, 0 for the main thread
        std::string startsym;          ///< the symbol there ("" when none)
        bool traceme = false;          ///< event reporting enabled
        std::string events;            ///< its own event mask (format_event_set)
    };
    std::optional<pid_t> tid;                ///< none for a record no LWP runs
    bool ns_column = false;                  ///< the target has a PID namespace of its own
    std::optional<pid_t> ns_tid;             ///< the TID there
    std::string name;                        ///< /proc/PID/task/TID/comm ("" without an LWP)
    std::string state;                       ///< "active", "zombie", "starting", "lwp", ...
    std::optional<std::uint64_t> handle;     ///< the record's address, for a row of the library's list
    std::optional<record_info> info;         ///< none when there is no record or it cannot be read
    json_record json() const;
    std::string text() const;
};

/// The column headings of the `threads` table.
std::string thread_columns(bool ns_column);

/// `event addr`: one event's reporting address, or why it has none.
struct event_addr_record {
    td_event_e event{};
    std::uint64_t address = 0;
    std::string symbol;
    std::optional<std::string> step_over;   ///< the step-over kind of a planted breakpoint; none when not planted
    std::optional<td_err_e> result;         ///< TD_NOEVENT (not reported) and the like; none when there is an address
    json_record json() const;
    std::string text() const;
};

/// `event set|clear`: the mask after the change.
struct mask_record {
    /// Thread scope: the TID as typed (text) and as a number (JSON); none for the global mask.
    std::optional<std::string> tid_word;
    std::string events;   ///< format_event_set of the new mask, "?" when it cannot be read back
    json_record json() const;
    std::string text() const;
};

/// `event enable`: one thread's reporting switched.
struct enable_record {
    pid_t tid = 0;               ///< ti_lid, 0 when the record cannot be read
    std::uint64_t handle = 0;
    bool on = false;
    json_record json() const;
    std::string text() const;
};

/// `event enable` over every thread: records no LWP runs, counted, not listed.
struct enable_count_record {
    enum class which { ended, starting } kind = which::ended;
    std::size_t count = 0;
    bool on = false;
    json_record json() const;
    std::string text() const;
};

/// `event getmsg` found no message (TD_NOMSG, an expected outcome).
struct no_message_record {
    std::optional<int> tid;   ///< the thread asked, none for "any thread"
    json_record json() const;
    std::string text() const;
};

/// The end of `watch`: how many messages, and why it ended
/// ("count", "duration", "signal", "exit", "detached").
struct watch_end_record {
    long long messages = 0;
    std::string reason;
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// Events of thread `tid` (an LWP) that `watch --stream --drop` counted
/// instead of writing, its ring being full (the agent's drop counters).
struct lost_record {
    pid_t tid = 0;
    std::uint64_t count = 0;
    json_record json() const;
    std::string text() const;
};

/// `continue` resumed the target.
struct continued_record {
    pid_t pid = 0;
    json_record json() const;
    std::string text() const;
};

/// `interrupt` holds the target's `threads` LWPs.
struct interrupted_record {
    pid_t pid = 0;
    std::size_t threads = 0;
    json_record json() const;
    std::string text() const;
};

/// tdctl let the target go (`detach`, or the end of the session).
struct detached_record {
    pid_t pid = 0;
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// `bt`: one thread's call stack, innermost frame first.
struct backtrace_record {
    pid_t tid = 0;
    std::string name;
    std::vector<core::stack_frame> frames;
    json_record json() const;
    std::string text() const;
};

/// `bt all`: the threads it listed that were ending (past their exit, or
/// reaped) when their turn came, so had no stack to read. Printed only when
/// there is one.
struct bt_skipped_record {
    std::vector<pid_t> tids;  ///< in the order `bt all` met them
    json_record json() const;
    std::string text() const;
};

/// `deadlock`: every cycle of the wait-for graph with each member's stack,
/// and every mutex wait (records_deadlock.cpp). A member holds the mutex the
/// member before it in the cycle wants (the one the graph shows; it may hold
/// others).
struct deadlock_record {
    pid_t pid = 0;
    core::deadlock_scan scan;
    json_record json() const;
    std::string text() const;
};

/// `help`: the text of the command list or of one command.
struct help_record {
    std::string text_;
    json_record json() const;
    std::string text() const { return text_; }
};

/// `stats show` (the whole window) or one `stats watch` row (`interval` set:
/// the averages over the interval just past).
struct stats_record {
    core::thread_stats stats;
    std::optional<core::stat_averages> interval;
    double at = 0;   ///< when the numbers were read
    json_record json() const;
    std::string text() const;
};

/// The column headings of `stats watch`.
std::string stats_columns();

/// `stats enable|disable|reset`: gathering on or off after the change.
struct stats_state_record {
    bool enabled = false;
    bool reset = false;   ///< the window was reset (`stats reset`)
    json_record json() const;
    std::string text() const;
};

/// `rusage start|stop`.
struct rusage_state_record {
    bool enabled = false;
    json_record json() const;
    std::string text() const;
};

/// `rusage collect`: one LWP's usage (fields Linux does not keep print as n/a / null).
struct rusage_record {
    pid_t tid = 0;
    std::string name;
    struct rusage usage {};
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// The column headings of `rusage collect`.
std::string rusage_columns();

/// `rusage collect all`: the process's own times, which include threads that
/// have exited (/proc/PID/stat), seconds.
struct rusage_process_record {
    pid_t pid = 0;
    double utime = 0;
    double stime = 0;
    unsigned long long minflt = 0;
    unsigned long long majflt = 0;
    json_record json() const;
    std::string text() const;
};

/// `lwpinfo`: one LWP's user and system CPU time, seconds (ns resolution).
struct lwpinfo_record {
    pid_t tid = 0;
    std::string name;
    double utime = 0;
    double stime = 0;
    json_record json() const;
    std::string text() const;
};

/// The column headings of `lwpinfo`.
std::string lwpinfo_columns();

/// `top`: one thread over one interval: percentages of one CPU over the
/// interval and per-second rates (core::rates_of). A thread alive for part
/// of the interval has %usr+%sys+%wait+%off below 100.
struct top_record {
    pid_t pid = 0;
    pid_t tid = 0;
    std::string name;
    core::lwp_rates rates;
    bool born = false;      ///< born inside the interval
    bool ended = false;     ///< ended inside the interval
    double interval = 0;    ///< the interval's length, s
    double time = 0;        ///< when it ended
    json_record json() const;
    std::string text() const;
};

/// `top`: the process line above the rows, the process over the interval as
/// one process (as `pidstat -t`'s TGID line), from every thread's row (those
/// left out by --limit and those that ended included): rates.usr and
/// rates.sys are the CPU the process used, in percent of one CPU (above 100
/// with several CPUs busy); rates.wait and rates.off are shares, in percent,
/// of its threads' time alive added together (thread_seconds); the
/// per-second rates are the threads' summed.
struct top_process_record {
    pid_t pid = 0;
    std::string name;
    std::size_t threads = 0;   ///< threads counted in the interval
    std::size_t born = 0;      ///< of them, born inside it
    std::size_t ended = 0;     ///< of them, ended inside it
    core::lwp_rates rates;
    double thread_seconds = 0; ///< the threads' time alive inside the interval, added together, s
    double interval = 0;
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// The column headings of `top`.
std::string top_columns();

/// The end of `watch` or `sleep`: one thread's time over the command's run,
/// split three ways (core::lwp_window_usage), in seconds; or, when `folded`
/// is not 0, the sum of that many threads beyond the rows shown.
struct time_split_record {
    std::string command;      ///< "watch" or "sleep"
    pid_t pid = 0;
    pid_t tid = 0;            ///< 0 for a folded row
    std::string name;
    std::size_t folded = 0;
    bool born = false;        ///< born during the run (false for a folded row)
    bool ended = false;       ///< ended during the run (false for a folded row)
    double on_cpu = 0;        ///< on a CPU (schedstat)
    double wait = 0;          ///< runnable, waiting on a run queue for a CPU (schedstat)
    double off = 0;           ///< alive but neither: blocked or sleeping
    double duration = 0;      ///< the command's run; a folded row: its threads' lives in it, summed
    double time = 0;
    json_record json() const;
    std::string text() const;
};

/// The line above the time_split rows (text only).
std::string time_split_heading(const std::string& command, double duration);

}  // namespace tdctl::cmd
