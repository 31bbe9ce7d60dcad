// The statistics, resource-usage and LWP-time commands (seeds 000, 001, 004):
// `stats`, `rusage`, `lwpinfo`.
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "cmd/commands.hpp"
#include "cmd/records.hpp"
#include "cmd/runner.hpp"
#include "core/lwp_usage.hpp"
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

}  // namespace

// ---------------------------------------------------------------- stats

command_status runner::cmd_stats(const words& w, const std::string& where)
{
    static const subcommand_entry subcommands[] = {
        {"enable", &runner::cmd_stats_enable},
        {"disable", &runner::cmd_stats_enable},
        {"reset", &runner::cmd_stats_reset},
        {"show", &runner::cmd_stats_show},
    };
    if (w.size() < 2)
        return usage_error(where, "usage: stats enable|disable|reset|show|watch ...");
    const std::string& sub = w[1];
    if (sub == "watch")
        return cmd_stats_watch(w, where);
    if (w.size() != 2)
        return usage_error(where, fmt::format("usage: stats {}", sub));
    if (!require_target(where))
        return command_status::failed;
    if (auto run = find_subcommand(subcommands, sub))
        return (this->*run)(w, where);
    return usage_error(where, fmt::format("unknown subcommand 'stats {}'; expected enable, disable, reset, show or watch",
                                          sub));
}

command_status runner::cmd_stats_enable(const words& w, const std::string& where)
{
    const bool on = w[1] == "enable";
    if (auto r = session_->accounting().enable_stats(on); !r)
        return td_error(r.error(), fmt::format("{}: stats {}", where, w[1]));
    out_.print(stats_state_record{.enabled = on, .reset = false});
    return command_status::ok;
}

command_status runner::cmd_stats_reset(const words&, const std::string& where)
{
    if (auto r = session_->accounting().reset_stats(); !r)
        return td_error(r.error(), fmt::format("{}: stats reset", where));
    auto now = session_->accounting().get_stats();
    out_.print(stats_state_record{.enabled = now ? now->enabled : false, .reset = true});
    return command_status::ok;
}

command_status runner::cmd_stats_show(const words&, const std::string& where)
{
    auto st = session_->accounting().get_stats();
    if (!st)
        return td_error(st.error(), fmt::format("{}: stats show", where));
    out_.print(stats_record{*st, std::nullopt, seconds_since_start()});
    return command_status::ok;
}

command_status runner::cmd_stats_watch(const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{option_interval | option_count, run_option_grammar::operand_kind::none,
                                                "", "usage: stats watch [--interval SECONDS] [--count N]"};
    auto options = parse_options(w, 2, grammar, where);
    if (!options || !require_target(where))
        return command_status::failed;
    auto first = session_->accounting().get_stats();
    if (!first)
        return td_error(first.error(), fmt::format("{}: stats watch", where));
    const bool was_enabled = first->enabled;
    if (!was_enabled) {
        session_->accounting().enable_stats(true);
        first = session_->accounting().get_stats();
    }
    let_run();
    out_.heading(stats_columns());
    auto status = stats_watch_rows(first->averages, options->interval.value_or(1.0), options->count, where);
    if (!was_enabled && has_target())
        session_->accounting().enable_stats(false);
    return status;
}

command_status runner::stats_watch_rows(core::stat_averages prev, double interval, std::optional<long long> count,
                                        const std::string& where)
{
    for (long long rows = 0; !count || rows < *count; ++rows) {
        if (run_for(interval) != run_end::timeout)
            break;
        auto st = session_->accounting().get_stats();
        if (!st)
            return td_error(st.error(), fmt::format("{}: stats watch", where));
        out_.print(stats_record{*st, interval_since(st->averages, prev), seconds_since_start()});
        prev = st->averages;
    }
    return command_status::ok;
}

// ---------------------------------------------------------------- rusage / lwpinfo

std::optional<std::vector<tid_t>> runner::lwp_list(const std::string& arg, const std::string& where)
{
    if (arg.empty() || arg == "all")
        return procfs::list_tasks(session_->target().pid());
    auto tid = parse_tid_word(arg, where, "a thread ID (a TID from `threads`) or all");
    if (!tid)
        return std::nullopt;
    return std::vector<tid_t>{*tid};
}

command_status runner::cmd_rusage(const words& w, const std::string& where)
{
    static const subcommand_entry subcommands[] = {
        {"start", &runner::cmd_rusage_switch},
        {"stop", &runner::cmd_rusage_switch},
        {"collect", &runner::cmd_rusage_collect},
    };
    if (w.size() < 2)
        return usage_error(where, "usage: rusage start|stop|collect [TID|all] [--interval S] [--count N]");
    if (!require_target(where))
        return command_status::failed;
    if (auto run = find_subcommand(subcommands, w[1]))
        return (this->*run)(w, where);
    return usage_error(where, fmt::format("unknown subcommand 'rusage {}'; expected start, stop or collect", w[1]));
}

command_status runner::cmd_rusage_switch(const words& w, const std::string& where)
{
    if (w.size() != 2)
        return usage_error(where, fmt::format("usage: rusage {}", w[1]));
    const bool on = w[1] == "start";
    if (on)
        session_->accounting().rusage_start();
    else
        session_->accounting().rusage_stop();
    out_.print(rusage_state_record{on});
    return command_status::ok;
}

command_status runner::cmd_rusage_collect(const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{option_interval | option_count, run_option_grammar::operand_kind::plain,
                                                "", "usage: rusage collect [TID|all] [--interval S] [--count N]"};
    auto options = parse_options(w, 2, grammar, where);
    if (!options)
        return command_status::failed;
    if (!options->interval) {
        if (options->count)
            return usage_error(where, "--count needs --interval");
        return rusage_round(options->operand, where) ? command_status::ok : command_status::failed;
    }
    let_run();
    for (long long n = 0; !options->count || n < *options->count; ++n) {
        if (run_for(*options->interval) != run_end::timeout)
            break;
        if (!rusage_round(options->operand, where))
            return command_status::failed;
    }
    return command_status::ok;
}

bool runner::rusage_round(const std::string& which, const std::string& where)
{
    auto lwps = lwp_list(which, where);
    if (!lwps)
        return false;
    output::bulk rows(out_);
    const auto round = gather_rusage(*session_, *lwps, which.empty() || which == "all");
    // No table heading above an error alone.
    if (!round.rows.empty())
        out_.heading(rusage_columns());
    for (const auto& row : round.rows)
        out_.print(row);
    if (const auto& f = round.failure) {
        std::string why = f->err == ENOSYS ? "resource usage collection is not started (run `rusage start`)"
                          : f->err == ESRCH ? fmt::format("no thread {} in process {}", f->tid.value, session_->target().pid())
                                            : std::strerror(f->err);
        // ENOSYS is the session's state, not one thread's: name what was asked.
        const std::string asked = f->err == ENOSYS ? (which.empty() ? std::string("all") : which)
                                                   : std::to_string(f->tid.value);
        out_.error(errno_name(f->err),
                   fmt::format("{}: rusage collect {}: {} ({})", where, asked, errno_name(f->err), why));
        return false;
    }
    if (round.process)
        out_.print(*round.process);
    return true;
}

command_status runner::cmd_lwpinfo(const words& w, const std::string& where)
{
    if (w.size() > 2)
        return usage_error(where, "usage: lwpinfo [TID|all]");
    if (!require_target(where))
        return command_status::failed;
    const std::string which = w.size() == 2 ? w[1] : "all";
    auto lwps = lwp_list(which, where);
    if (!lwps)
        return command_status::failed;
    std::vector<lwpinfo_record> rows;
    std::optional<row_failure> failure;
    auto got = session_->accounting().lwp_info_rows(*lwps);
    for (std::size_t i = 0; i < lwps->size(); ++i) {
        const tid_t t = (*lwps)[i];
        if (auto& info = got[i])
            rows.push_back({t.value, info->comm, core::to_seconds(info->times.utime),
                            core::to_seconds(info->times.stime)});
        else if (which != "all")
            failure = row_failure{t, info.error()};
    }
    output::bulk batch(out_);
    if (!rows.empty())
        out_.heading(lwpinfo_columns());
    for (const auto& row : rows)
        out_.print(row);
    if (!failure)
        return command_status::ok;
    out_.error(errno_name(failure->err), fmt::format("{}: lwpinfo {}: {} (no thread {} in process {})", where,
                                                     failure->tid.value, errno_name(failure->err), failure->tid.value,
                                                     session_->target().pid()));
    return command_status::failed;
}

}  // namespace tdctl::cmd
