// The statistics, resource-usage and LWP-time commands (seeds 000, 001, 004):
// `stats`, `rusage`, `lwpinfo`.
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/quoting.hpp"
#include "cmd/commands.hpp"
#include "cmd/records.hpp"
#include "core/accounting/lwp_usage.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::cmd {

namespace {

std::string errno_name(int err)
{
    if (const char* n = strerrorname_np(err))
        return n;
    return fmt::format("E{}", err);
}

// Interval averages from two cumulative snapshots of the same window: the
// numerators are integrals from the window's start, so they subtract.
core::stat_fraction delta(const core::stat_fraction& later, const core::stat_fraction& earlier)
{
    if (later.den < earlier.den || later.num < earlier.num)
        return later;
    return {later.num - earlier.num, later.den - earlier.den};
}

core::stat_averages interval_since(const core::stat_averages& now, const core::stat_averages& prev)
{
    core::stat_averages iv;
    iv.nrunnable = delta(now.nrunnable, prev.nrunnable);
    iv.a_concurrency = delta(now.a_concurrency, prev.a_concurrency);
    iv.nlwps = delta(now.nlwps, prev.nlwps);
    iv.nidle = delta(now.nidle, prev.nidle);
    iv.window_seconds = static_cast<double>(iv.nlwps.den) / 1e9;
    return iv;
}

// An LWP a row could not be read for, and the errno.
struct row_failure {
    tid_t tid;
    int err = 0;
};

// One round of `rusage collect`, up to the first row that failed.
struct rusage_rows {
    std::vector<rusage_record> rows;
    std::optional<row_failure> failure;
    std::optional<rusage_process_record> process;   ///< with `all`: the process's own line
};

// The process line: its times include threads that have exited.
std::optional<rusage_process_record> process_usage(pid_t pid)
{
    auto st = procfs::read_stat(pid);
    if (!st)
        return std::nullopt;
    const auto ticks = static_cast<double>(core::clock_ticks_per_second());
    return rusage_process_record{pid, static_cast<double>(st->utime) / ticks, static_cast<double>(st->stime) / ticks,
                                 st->minflt, st->majflt};
}

// `all`: a thread that ended between listing and reading is left out.
rusage_rows gather_rusage(core::session& session, const std::vector<tid_t>& lwps, bool all)
{
    rusage_rows round;
    // VmHWM is the process's: read once per round, not once per row.
    const long maxrss = core::process_maxrss_kb(session.target().pid());
    auto got = session.accounting().rusage_collect_rows(lwps, maxrss);
    for (std::size_t i = 0; i < lwps.size(); ++i) {
        const tid_t t = lwps[i];
        auto& row = got[i];
        if (row) {
            round.rows.push_back({t.value, row->comm, row->usage, seconds_since_start()});
            continue;
        }
        if (all && row.error() == ESRCH)
            continue;
        round.failure = row_failure{t, row.error()};
        return round;
    }
    if (all)
        round.process = process_usage(session.target().pid());
    return round;
}

command_status stats_enable(command_context& c, const words& w, const std::string& where)
{
    const bool on = w[1] == "enable";
    if (auto r = c.session().accounting().enable_stats(on); !r)
        return c.check.td_error(r.error(), fmt::format("{}: stats {}", where, w[1]));
    c.out.print(stats_state_record{.enabled = on, .reset = false});
    return command_status::ok;
}

command_status stats_reset(command_context& c, const words&, const std::string& where)
{
    if (auto r = c.session().accounting().reset_stats(); !r)
        return c.check.td_error(r.error(), fmt::format("{}: stats reset", where));
    auto now = c.session().accounting().get_stats();
    c.out.print(stats_state_record{.enabled = now ? now->enabled : false, .reset = true});
    return command_status::ok;
}

command_status stats_show(command_context& c, const words&, const std::string& where)
{
    auto st = c.session().accounting().get_stats();
    if (!st)
        return c.check.td_error(st.error(), fmt::format("{}: stats show", where));
    c.out.print(stats_record{*st, std::nullopt, seconds_since_start()});
    return command_status::ok;
}

// `stats watch`'s rows: one per `interval` seconds, up to `count`,
// averaged over the interval since `prev`.
command_status stats_watch_rows(command_context& c, core::stat_averages prev, double interval,
                                std::optional<long long> count, const std::string& where)
{
    for (long long rows = 0; !count || rows < *count; ++rows) {
        if (c.loop.run_for(interval) != run_end::timeout)
            break;
        auto st = c.session().accounting().get_stats();
        if (!st)
            return c.check.td_error(st.error(), fmt::format("{}: stats watch", where));
        c.out.print(stats_record{*st, interval_since(st->averages, prev), seconds_since_start()});
        prev = st->averages;
    }
    return command_status::ok;
}

command_status stats_watch(command_context& c, const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{option_interval | option_count, run_option_grammar::operand_kind::none,
                                                "", "usage: stats watch [--interval SECONDS] [--count N]"};
    auto options = c.check.parse_options(w, 2, grammar, where);
    if (!options || !c.check.require_target(where))
        return command_status::failed;
    auto first = c.session().accounting().get_stats();
    if (!first)
        return c.check.td_error(first.error(), fmt::format("{}: stats watch", where));
    const bool was_enabled = first->enabled;
    if (!was_enabled) {
        c.session().accounting().enable_stats(true);
        first = c.session().accounting().get_stats();
    }
    c.loop.let_run();
    c.out.heading(stats_columns());
    auto status = stats_watch_rows(c, first->averages, options->interval.value_or(1.0), options->count, where);
    if (!was_enabled && c.target.has_target())
        c.session().accounting().enable_stats(false);
    return status;
}

command_status rusage_switch(command_context& c, const words& w, const std::string& where)
{
    if (w.size() != 2)
        return c.check.usage_error(where, fmt::format("usage: rusage {}", w[1]));
    const bool on = w[1] == "start";
    if (on)
        c.session().accounting().rusage_start();
    else
        c.session().accounting().rusage_stop();
    c.out.print(rusage_state_record{on});
    return command_status::ok;
}

// One round of `rusage collect`: every row of `which` ("", "all" or a TID).
bool rusage_round(command_context& c, const std::string& which, const std::string& where)
{
    auto lwps = c.check.lwp_list(which, where);
    if (!lwps)
        return false;
    output::bulk rows(c.out);
    const auto round = gather_rusage(c.session(), *lwps, which.empty() || which == "all");
    // No table heading above an error alone.
    if (!round.rows.empty())
        c.out.heading(rusage_columns());
    for (const auto& row : round.rows)
        c.out.print(row);
    if (const auto& f = round.failure) {
        const pid_t pid = c.session().target().pid();
        std::string why = f->err == ENOSYS ? "resource usage collection is not started (run `rusage start`)"
                          : f->err == ESRCH ? fmt::format("no thread {} in process {}", f->tid.value, pid)
                                            : std::strerror(f->err);
        // ENOSYS is the session's state, not one thread's: name what was asked.
        const std::string asked = f->err == ENOSYS ? (which.empty() ? std::string("all") : which)
                                                   : std::to_string(f->tid.value);
        c.out.error(errno_name(f->err),
                    fmt::format("{}: rusage collect {}: {} ({})", where, asked, errno_name(f->err), why));
        return false;
    }
    if (round.process)
        c.out.print(*round.process);
    return true;
}

command_status rusage_collect(command_context& c, const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{option_interval | option_count, run_option_grammar::operand_kind::plain,
                                                "", "usage: rusage collect [TID|all] [--interval S] [--count N]"};
    auto options = c.check.parse_options(w, 2, grammar, where);
    if (!options)
        return command_status::failed;
    if (!options->interval) {
        if (options->count)
            return c.check.usage_error(where, "--count needs --interval");
        return rusage_round(c, options->operand, where) ? command_status::ok : command_status::failed;
    }
    c.loop.let_run();
    for (long long n = 0; !options->count || n < *options->count; ++n) {
        if (c.loop.run_for(*options->interval) != run_end::timeout)
            break;
        if (!rusage_round(c, options->operand, where))
            return command_status::failed;
    }
    return command_status::ok;
}

}  // namespace

command_status cmd_stats(command_context& c, const words& w, const std::string& where)
{
    static const subcommand_entry subcommands[] = {
        {"enable", stats_enable},
        {"disable", stats_enable},
        {"reset", stats_reset},
        {"show", stats_show},
    };
    if (w.size() < 2)
        return c.check.usage_error(where, "usage: stats enable|disable|reset|show|watch ...");
    const std::string& sub = w[1];
    if (sub == "watch")
        return stats_watch(c, w, where);
    if (w.size() != 2)
        return c.check.usage_error(where, fmt::format("usage: stats {}", word_excerpt(sub)));
    if (!c.check.require_target(where))
        return command_status::failed;
    if (auto run = find_subcommand(subcommands, sub))
        return run(c, w, where);
    return c.check.usage_error(
        where, fmt::format("unknown subcommand 'stats {}'; expected enable, disable, reset, show or watch",
                           word_excerpt(sub)));
}

command_status cmd_rusage(command_context& c, const words& w, const std::string& where)
{
    static const subcommand_entry subcommands[] = {
        {"start", rusage_switch},
        {"stop", rusage_switch},
        {"collect", rusage_collect},
    };
    if (w.size() < 2)
        return c.check.usage_error(where, "usage: rusage start|stop|collect [TID|all] [--interval S] [--count N]");
    if (!c.check.require_target(where))
        return command_status::failed;
    if (auto run = find_subcommand(subcommands, w[1]))
        return run(c, w, where);
    return c.check.usage_error(where,
                               fmt::format("unknown subcommand 'rusage {}'; expected start, stop or collect",
                                           word_excerpt(w[1])));
}

command_status cmd_lwpinfo(command_context& c, const words& w, const std::string& where)
{
    if (w.size() > 2)
        return c.check.usage_error(where, "usage: lwpinfo [TID|all]");
    if (!c.check.require_target(where))
        return command_status::failed;
    const std::string which = w.size() == 2 ? w[1] : "all";
    auto lwps = c.check.lwp_list(which, where);
    if (!lwps)
        return command_status::failed;
    std::vector<lwpinfo_record> rows;
    std::optional<row_failure> failure;
    auto got = c.session().accounting().lwp_info_rows(*lwps);
    for (std::size_t i = 0; i < lwps->size(); ++i) {
        const tid_t t = (*lwps)[i];
        if (auto& info = got[i])
            rows.push_back({t.value, info->comm, core::to_seconds(info->times.utime),
                            core::to_seconds(info->times.stime)});
        else if (which != "all")
            failure = row_failure{t, info.error()};
    }
    output::bulk batch(c.out);
    if (!rows.empty())
        c.out.heading(lwpinfo_columns());
    for (const auto& row : rows)
        c.out.print(row);
    if (!failure)
        return command_status::ok;
    c.out.error(errno_name(failure->err), fmt::format("{}: lwpinfo {}: {} (no thread {} in process {})", where,
                                                      failure->tid.value, errno_name(failure->err), failure->tid.value,
                                                      c.session().target().pid()));
    return command_status::failed;
}

}  // namespace tdctl::cmd
