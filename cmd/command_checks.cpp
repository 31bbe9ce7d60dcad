#include "cmd/command_checks.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/quoting.hpp"
#include "events/event_names.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::cmd {

command_checks::command_checks(output& out, session_slot& target) : out_(out), target_(target) {}

command_status command_checks::usage_error(const std::string& where, const std::string& message)
{
    out_.error("usage", fmt::format("{}: {}", where, message));
    return command_status::failed;
}

command_status command_checks::td_error(td_err_e err, const std::string& what)
{
    out_.error(td_err_name(err), fmt::format("{}: {} ({})", what, td_err_name(err), td_err_description(err)));
    return command_status::failed;
}

bool command_checks::require_target(const std::string& where)
{
    if (target_.has_target())
        return true;
    std::string why = target_.exit_status() ? "the target has exited" : "tdctl is no longer attached to the target";
    out_.error("no-target", fmt::format("{}: {}; `attach PID` or `run PROG [ARGS]` starts another session", where,
                                        why));
    return false;
}

bool command_checks::require_agent(const std::string& where)
{
    if (!require_target(where))
        return false;
    auto& target = target_.session().target();
    if (target.agent() != nullptr)
        return true;
    out_.error("TD_NOLIBTHREAD", fmt::format("{}: TD_NOLIBTHREAD ({}): {}", where, td_err_description(TD_NOLIBTHREAD),
                                             target.no_agent_reason()));
    return false;
}

std::optional<event_delivery> command_checks::choose_delivery(const run_options& options, std::string_view command,
                                                              std::string_view bt_reason, const std::string& where)
{
    const bool asked = options.stream || options.drop;
    if (options.stop && asked) {
        usage_error(where, fmt::format("{}: --stop and {} exclude each other (--stop: each report stops its thread{})",
                                       command, options.stream ? "--stream" : "--drop",
                                       options.stream ? "" : "; drops are counted in the rings"));
        return std::nullopt;
    }
    if (options.stop)
        return event_delivery{false, false, " (--stop)"};
    const std::string rings = target_.session().stream().unavailable_reason();
    if (asked) {
        const std::string why = options.bt ? std::string(bt_reason) : rings;
        if (!why.empty()) {
            usage_error(where, fmt::format("{} {}: {}", command, options.stream ? "--stream" : "--drop", why));
            return std::nullopt;
        }
        return event_delivery{true, true, {}};
    }
    if (options.bt)
        return event_delivery{false, false, fmt::format(" ({})", bt_reason)};
    if (!rings.empty())
        return event_delivery{false, false,
                              target_.session().target().has_module("libtdagent.so")
                                  ? " (" + rings + ")"
                                  : std::string(" (with --agent they stream, no stop)")};
    return event_delivery{true, false, {}};
}

bool command_checks::bare_command_ready(const words& w, const std::string& where, const char* name)
{
    if (w.size() != 1) {
        usage_error(where, fmt::format("usage: {}", name));
        return false;
    }
    return require_target(where);
}

std::optional<run_options> command_checks::parse_options(const words& w, std::size_t first,
                                                         const run_option_grammar& grammar, const std::string& where)
{
    auto options = parse_run_options(w, first, grammar);
    if (!options) {
        usage_error(where, options.error());
        return std::nullopt;
    }
    return *options;
}

std::optional<std::vector<td_event_e>> command_checks::parse_events(const std::string& text, const std::string& where)
{
    auto list = events::parse_event_list(text);
    if (!list) {
        usage_error(where, list.error());
        return std::nullopt;
    }
    return *list;
}

std::optional<tid_t> command_checks::parse_tid_word(const std::string& text, const std::string& where,
                                                    const char* accepted)
{
    auto tid = parse_tid(text);
    if (!tid) {
        usage_error(where, fmt::format("{} is not {}", quoted_word(text), accepted));
        return std::nullopt;
    }
    return tid_t{*tid};
}

std::optional<core::thread_handle> command_checks::handle_for(const std::string& tid_text, const std::string& where)
{
    auto tid = parse_tid_word(tid_text, where, "a thread ID (a TID from `threads`)");
    if (!tid)
        return std::nullopt;
    auto th = target_.session().target().agent()->map_lwp2thr(*tid);
    if (!th) {
        td_error(th.error(), fmt::format("{}: thread {}", where, tid->value));
        return std::nullopt;
    }
    return *th;
}

std::optional<std::vector<tid_t>> command_checks::lwp_list(const std::string& arg, const std::string& where)
{
    if (arg.empty() || arg == "all")
        return procfs::list_tasks(target_.session().target().pid());
    auto tid = parse_tid_word(arg, where, "a thread ID (a TID from `threads`) or all");
    if (!tid)
        return std::nullopt;
    return std::vector<tid_t>{*tid};
}

}  // namespace tdctl::cmd
