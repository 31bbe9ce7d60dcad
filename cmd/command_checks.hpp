// What every command checks before it acts, and the error records it prints
// when a check fails: its words (options, event lists, TIDs), a target to
// act on, the agent. Each check that fails has printed its error record.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "cmd/command_line.hpp"
#include "cmd/output.hpp"
#include "cmd/session_slot.hpp"
#include "core/thread_handle.hpp"

namespace tdctl::cmd {

enum class command_status {
    ok,
    failed,      ///< the command did not do what was asked (batch: exit 2)
    quit,        ///< `quit`, or end of input
    nothing,     ///< it ran and found nothing there: TD_NOMSG, no event reported (batch: exit 1, like grep)
    timed_out,   ///< `stop --for` ended with no hit (batch: exit 3)
};

/// The words of one command line, the command's name first.
using words = std::vector<std::string>;

/// How a command's events reach tdctl (command_checks::choose_delivery).
struct event_delivery {
    /// Through the agent's event rings, drained while the target runs: no
    /// thread stops for an event.
    bool stream = false;
    /// --stream or --drop was given: streaming that cannot start is an
    /// error, not a fall back to stops.
    bool asked = false;
    /// Why each report stops its thread, as the end of the command's
    /// header (" (--stop)", " (with --agent they stream, no stop)"); empty when
    /// streaming.
    std::string stop_reason;
};

class command_checks {
public:
    /// Both borrowed; they must outlive the checks.
    command_checks(output& out, session_slot& target);

    /// A usage error record ("usage") naming `where`; command_status::failed.
    command_status usage_error(const std::string& where, const std::string& message);
    /// An error record for a td_err_e: its name, then its description.
    command_status td_error(td_err_e err, const std::string& what);

    /// A target to act on; false after the error that says why there is none.
    bool require_target(const std::string& where);
    /// A target whose thread library tdctl can drive; false after the error.
    bool require_agent(const std::string& where);
    /// How the events of COMMAND (`watch`, `locks`) reach tdctl, from
    /// `options`: --stop, or --bt (which needs each reporter stopped;
    /// `bt_reason` says so in the command's terms), stops each reporter;
    /// --stream or --drop streams; by default the events stream when the
    /// agent in the target has event rings (event_stream::unavailable_reason),
    /// else each report stops its thread. nullopt after the usage error:
    /// --stop with --stream or --drop, --stream or --drop with --bt or where
    /// the target has no rings ("COMMAND --stream: <why>").
    std::optional<event_delivery> choose_delivery(const run_options& options, std::string_view command,
                                                  std::string_view bt_reason, const std::string& where);
    /// A command of one word (`continue`, `detach`...) with a target to act
    /// on; false after the usage or no-target error.
    bool bare_command_ready(const words& w, const std::string& where, const char* name);

    /// The options of words[first...] by `grammar`; nullopt after a usage error.
    std::optional<run_options> parse_options(const words& w, std::size_t first, const run_option_grammar& grammar,
                                             const std::string& where);
    /// EVENTS as typed (events::parse_event_list); nullopt after a usage error.
    std::optional<std::vector<td_event_e>> parse_events(const std::string& text, const std::string& where);
    /// A TID typed by the user, or nullopt after a usage error naming `accepted`.
    std::optional<tid_t> parse_tid_word(const std::string& text, const std::string& where, const char* accepted);
    /// The thread handle of a TID typed by the user (td_ta_map_lwp2thr);
    /// nullopt after the usage or td_* error.
    std::optional<core::thread_handle> handle_for(const std::string& tid_text, const std::string& where);
    /// LWPs of "" / "all" (every task of the process) or of one TID.
    std::optional<std::vector<tid_t>> lwp_list(const std::string& arg, const std::string& where);

private:
    output& out_;
    session_slot& target_;
};

}  // namespace tdctl::cmd
