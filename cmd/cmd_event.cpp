// `event addr|set|clear|enable|getmsg`: the td_* event calls by hand.
#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/quoting.hpp"
#include "cmd/commands.hpp"
#include "cmd/records.hpp"
#include "cmd/target_hold.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"

namespace tdctl::cmd {

namespace {

std::optional<bool> parse_on_off(const std::string& word)
{
    if (word == "on" || word == "1")
        return true;
    if (word == "off" || word == "0")
        return false;
    return std::nullopt;
}

// What `event enable` did, thread by thread, up to the first failure.
struct enable_outcome {
    std::vector<enable_record> rows;
    std::size_t ended = 0;      ///< records of ended threads not yet joined (counted, not listed)
    std::size_t starting = 0;   ///< records set up for threads not cloned yet
    std::optional<td_err_e> failure;
};

enable_outcome enable_each(core::session& session, const std::vector<core::thread_handle>& targets, bool on)
{
    enable_outcome out;
    for (const auto& th : targets) {
        if (auto r = session.changes().thr_event_enable(th, on); !r) {
            out.failure = r.error();
            return out;
        }
        auto info = th.get_info();
        auto lwp = th.lwp();
        const bool has_lwp = lwp && *lwp;
        // Listed one line per LWP; records no LWP runs are counted (there may
        // be thousands on a thread storm), never shown under the process ID.
        if (targets.size() > 1 && info && (!has_lwp || info->ti_state != TD_THR_ACTIVE)) {
            if (!has_lwp && info->ti_state == TD_THR_ACTIVE)
                ++out.starting;   // set up, not cloned yet
            else
                ++out.ended;      // ended (or ending), not yet joined
            continue;
        }
        out.rows.push_back({info ? info->ti_lid : 0, th.value().value, on});
    }
    return out;
}

command_status event_addr(command_context& c, const words& w, const std::string& where)
{
    if (w.size() != 3)
        return c.check.usage_error(where, "usage: event addr EVENTS");
    auto list = c.check.parse_events(w[2], where);
    if (!list)
        return command_status::failed;
    if (!c.check.require_agent(where))
        return command_status::failed;
    // An event the library does not report is an answer (TD_NOEVENT), one
    // line per event; a failure to read the target is an error.
    bool any_address = false;
    command_status status = command_status::ok;
    for (td_event_e e : *list) {
        auto addr = c.session().target().agent()->reporting_address_of(e);
        if (!addr && addr.error() != TD_NOEVENT) {
            c.check.td_error(addr.error(), fmt::format("{}: event addr {}", where, events::event_name(e)));
            status = command_status::failed;
            continue;
        }
        event_addr_record rec;
        rec.event = e;
        if (!addr) {
            rec.result = addr.error();
            c.out.print(rec);
            continue;
        }
        any_address = true;
        rec.address = addr->address.value;
        rec.symbol = addr->symbol;
        if (const auto* site = c.session().target().process().sites().at(addr->address))
            rec.step_over = ptrace::step_over_name(site->kind());
        c.out.print(rec);
    }
    if (status == command_status::ok && !any_address)
        return command_status::nothing;
    return status;
}

command_status event_mask(command_context& c, const words& w, const std::string& where, bool set)
{
    const char* verb = set ? "set" : "clear";
    if (w.size() != 3 && w.size() != 4)
        return c.check.usage_error(where, fmt::format("usage: event {} EVENTS [TID]", verb));
    auto list = c.check.parse_events(w[2], where);
    if (!list)
        return command_status::failed;
    if (!c.check.require_agent(where))
        return command_status::failed;
    auto mask = events::to_event_set(*list);
    target_hold hold(c.session(), c.out);
    if (w.size() == 4) {
        auto th = c.check.handle_for(w[3], where);
        if (!th)
            return command_status::failed;
        auto& changes = c.session().changes();
        auto r = set ? changes.thr_set_event(*th, mask) : changes.thr_clear_event(*th, mask);
        if (!r)
            return c.check.td_error(r.error(),
                                    fmt::format("{}: event {} {} {}", where, verb, word_excerpt(w[2]), w[3]));
        auto info = th->get_info();
        c.out.print(mask_record{w[3], info ? events::format_event_set(info->ti_events) : "?"});
        return command_status::ok;
    }
    auto r = set ? c.session().changes().ta_set_event(mask) : c.session().changes().ta_clear_event(mask);
    if (!r)
        return c.check.td_error(r.error(), fmt::format("{}: event {} {}", where, verb, word_excerpt(w[2])));
    auto now = c.session().target().agent()->global_mask();
    c.out.print(mask_record{std::nullopt, now ? events::format_event_set(*now) : "?"});
    return command_status::ok;
}

command_status event_set(command_context& c, const words& w, const std::string& where)
{
    return event_mask(c, w, where, true);
}

command_status event_clear(command_context& c, const words& w, const std::string& where)
{
    return event_mask(c, w, where, false);
}

command_status event_enable(command_context& c, const words& w, const std::string& where)
{
    if (w.size() != 3 && w.size() != 4)
        return c.check.usage_error(where, "usage: event enable on|off [TID|all]");
    auto on = parse_on_off(w[2]);
    if (!on)
        return c.check.usage_error(where, fmt::format("expected on or off, got {}", quoted_word(w[2])));
    if (!c.check.require_agent(where))
        return command_status::failed;
    target_hold hold(c.session(), c.out);
    std::vector<core::thread_handle> targets;
    if (w.size() == 4 && w[3] != "all") {
        auto th = c.check.handle_for(w[3], where);
        if (!th)
            return command_status::failed;
        targets.push_back(*th);
    } else {
        auto list = c.session().target().agent()->thr_iter();
        if (!list)
            return c.check.td_error(list.error(), fmt::format("{}: event enable", where));
        targets = *list;
    }
    const auto done = enable_each(c.session(), targets, *on);
    if (w.size() == 3 || w[3] == "all")
        c.session().changes().note_enable_all(*on && !done.failure);
    for (const auto& row : done.rows)
        c.out.print(row);
    if (done.failure)
        return c.check.td_error(*done.failure, fmt::format("{}: event enable {}", where, w[2]));
    using which = enable_count_record::which;
    if (done.ended != 0)
        c.out.print(enable_count_record{which::ended, done.ended, *on});
    if (done.starting != 0)
        c.out.print(enable_count_record{which::starting, done.starting, *on});
    return command_status::ok;
}

command_status event_getmsg(command_context& c, const words& w, const std::string& where)
{
    if (w.size() != 2 && w.size() != 3)
        return c.check.usage_error(where, "usage: event getmsg [TID]");
    if (!c.check.require_agent(where))
        return command_status::failed;
    std::optional<core::thread_handle> th;
    if (w.size() == 3) {
        th = c.check.handle_for(w[2], where);
        if (!th)
            return command_status::failed;
    }
    // The message list is edited in place: no thread may push meanwhile.
    auto msg = [&] {
        target_hold hold(c.session(), c.out);
        return th ? th->event_getmsg() : c.session().target().agent()->event_getmsg();
    }();
    if (!msg && msg.error() == TD_NOMSG) {
        // An expected outcome, not a failure.
        c.out.print(no_message_record{th ? std::optional<int>(std::stoi(w[2])) : std::nullopt});
        return command_status::nothing;
    }
    if (!msg)
        return c.check.td_error(msg.error(), fmt::format("{}: event getmsg", where));
    events::event_message m;
    m.event = msg->event;
    m.handle = msg->handle;
    m.data = msg->data;
    m.tid = c.session().target().lwp_of(msg->handle);
    m.ns_tid = c.session().target().foreign_ns_tid(m.tid);
    m.name = m.tid.value ? c.session().target().thread_name(m.tid) : std::string();
    m.time = seconds_since_start();
    c.out.event(m);
    return command_status::ok;
}

}  // namespace

command_status cmd_event(command_context& c, const words& w, const std::string& where)
{
    static const subcommand_entry subcommands[] = {
        {"addr", event_addr},     {"set", event_set},       {"clear", event_clear},
        {"enable", event_enable}, {"getmsg", event_getmsg},
    };
    if (w.size() < 2)
        return c.check.usage_error(where, "usage: event addr|set|clear|enable|getmsg ... (see `help event`)");
    if (auto run = find_subcommand(subcommands, w[1]))
        return run(c, w, where);
    return c.check.usage_error(
        where, fmt::format("unknown subcommand 'event {}'; expected addr, set, clear, enable or getmsg",
                           word_excerpt(w[1])));
}

}  // namespace tdctl::cmd
