#include "cmd/runner.hpp"

#include <utility>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/quoting.hpp"
#include "cmd/commands.hpp"

namespace tdctl::cmd {

runner::runner(std::unique_ptr<core::session> session, output& out, signal_source& signals, bool launched)
    : out_(out), target_(std::move(session), launched), checks_(out, target_),
      summary_([](const events::event_message& msg) {
          // The new thread's start routine, read with the event buffer
          // (core::event_watch); 0 when unknown.
          return msg.start_routine.value;
      }),
      loop_(target_, out, signals)
{
    out_.add_observer(&summary_);
}

runner::~runner()
{
    out_.remove_observer(&summary_);
}

command_context runner::context()
{
    return command_context{target_, out_, loop_, checks_, summary_, trace_, detach_follows_};
}

command_status runner::execute(const std::string& line, const std::string& where)
{
    auto w = split_words(line);
    if (!w)
        return checks_.usage_error(where, w.error());
    if (w->empty())
        return command_status::ok;
    // Stops that came in since the last command (a thread born or ending)
    // are serviced first, so the target does not wait on a long script.
    loop_.poll_target();
    const command_entry* command = find_command(w->front());
    if (command == nullptr) {
        std::string names;
        for (const auto& c : command_table())
            names += (names.empty() ? "" : ", ") + std::string(c.name);
        return checks_.usage_error(
            where, fmt::format("unknown command {}; expected one of: {}", quoted_word(w->front()), names));
    }
    const bool follows = std::exchange(command_follows_, false);
    share_stop_round(*command, follows);
    command_status st = command_status::failed;
    try {
        auto c = context();
        st = command->run(c, *w, where);
    } catch (const error& e) {
        out_.error(e.domain() == error_domain::td ? td_err_name(static_cast<td_err_e>(e.code())) : "error",
                   fmt::format("{}: {}", where, e.what()));
    }
    if (!follows && !detach_follows_ && target_.is_alive())
        target_.session().release_lingering();
    return st;
}

void runner::share_stop_round(const command_entry& command, bool follows)
{
    // Commands that look at or edit the target while every thread is
    // stopped take over a stop that lingers and, when another command
    // follows at once, hand theirs on. `watch` and `stop` arm first (a stop
    // of every thread they can take over) and let the target run when they
    // wait for it (session::pump).
    if (!target_.is_alive())
        return;
    const bool holds = command.stops == stop_use::shares;
    if (!holds)
        target_.session().release_lingering();
    target_.session().set_hold_may_linger(holds && (follows || detach_follows_));
}

command_status runner::watch_until_exit()
{
    auto c = context();
    return cmd_watch(c, {"watch"}, "watch");
}

}  // namespace tdctl::cmd
