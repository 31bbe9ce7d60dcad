// The statistics, resource-usage and LWP-time commands (seeds 000, 001, 004):
// `stats`, `rusage`, `lwpinfo`.
#include <cerrno>
#include <cstring>
#include <sys/resource.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "cmd/command_line.hpp"
#include "cmd/runner.hpp"
#include "core/lwp_usage.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::cmd {

using events::json_record;

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

std::string fraction_text(const core::stat_fraction& f)
{
    int n = 0, d = 0;
    core::reduce_to_int(f.num, f.den, n, d);
    return fmt::format("{:.2f} ({}/{})", f.value(), n, d);
}

}  // namespace

// ---------------------------------------------------------------- stats

void runner::print_stats(const core::thread_stats& st, const core::stat_averages* interval, double at)
{
    const core::stat_averages& a = interval ? *interval : st.averages;
    int nr_n, nr_d, ac_n, ac_d, nl_n, nl_d, ni_n, ni_d;
    core::reduce_to_int(a.nrunnable.num, a.nrunnable.den, nr_n, nr_d);
    core::reduce_to_int(a.a_concurrency.num, a.a_concurrency.den, ac_n, ac_d);
    core::reduce_to_int(a.nlwps.num, a.nlwps.den, nl_n, nl_d);
    core::reduce_to_int(a.nidle.num, a.nidle.den, ni_n, ni_d);
    json_record rec;
    rec["type"] = "stats";
    rec["nthreads"] = st.td.nthreads;
    rec["r_concurrency"] = st.td.r_concurrency;
    rec["nrunnable_num"] = nr_n;
    rec["nrunnable_den"] = nr_d;
    rec["a_concurrency_num"] = ac_n;
    rec["a_concurrency_den"] = ac_d;
    rec["nlwps_num"] = nl_n;
    rec["nlwps_den"] = nl_d;
    rec["nidle_num"] = ni_n;
    rec["nidle_den"] = ni_d;
    rec["nrunnable"] = a.nrunnable.value();
    rec["a_concurrency"] = a.a_concurrency.value();
    rec["nlwps"] = a.nlwps.value();
    rec["nidle"] = a.nidle.value();
    rec["window"] = events::json_seconds(a.window_seconds);
    rec["enabled"] = st.enabled;
    rec["nthreads_source"] = st.nthreads_source;
    rec["r_concurrency_source"] = st.r_concurrency_source.empty() ? json_record(nullptr)
                                                                   : json_record(st.r_concurrency_source);
    // The unreduced 64-bit parts: LWP·ns over ns.
    rec["ns"] = {{"nrunnable", {a.nrunnable.num, a.nrunnable.den}},
                 {"a_concurrency", {a.a_concurrency.num, a.a_concurrency.den}},
                 {"nlwps", {a.nlwps.num, a.nlwps.den}},
                 {"nidle", {a.nidle.num, a.nidle.den}}};
    rec["time"] = events::json_seconds(at);
    std::string text;
    if (interval) {
        text = fmt::format("{:>9.3f} {:>8} {:>22} {:>22} {:>22} {:>22}", at, st.td.nthreads,
                           fraction_text(a.nrunnable), fraction_text(a.a_concurrency), fraction_text(a.nlwps),
                           fraction_text(a.nidle));
    } else {
        text = fmt::format("nthreads       {} (from {})\n"
                           "r_concurrency  {}{}\n"
                           "nrunnable      {}\n"
                           "a_concurrency  {}\n"
                           "nlwps          {}\n"
                           "nidle          {}\n"
                           "window         {:.3f} s, gathering {}",
                           st.td.nthreads, st.nthreads_source, st.td.r_concurrency,
                           st.r_concurrency_source.empty()
                               ? " (glibc's __concurrency_level not found: install libc6-dbg for libc's debug symbols)"
                               : "",
                           fraction_text(a.nrunnable), fraction_text(a.a_concurrency), fraction_text(a.nlwps),
                           fraction_text(a.nidle), a.window_seconds,
                           st.enabled                ? "on"
                           : a.window_seconds == 0.0 ? "off (`stats enable` starts a window)"
                                                     : "off (averages frozen)");
    }
    out_.record(rec, text);
}

command_status runner::cmd_stats(const words& w, const std::string& where)
{
    if (w.size() < 2)
        return usage_error(where, "usage: stats enable|disable|reset|show|watch ...");
    const std::string& sub = w[1];
    if (sub == "watch")
        return cmd_stats_watch(w, where);
    if (w.size() != 2)
        return usage_error(where, fmt::format("usage: stats {}", sub));
    if (!require_target(where))
        return command_status::failed;
    if (sub == "enable" || sub == "disable") {
        bool on = sub == "enable";
        if (auto r = session_.enable_stats(on); !r)
            return td_error(r.error(), fmt::format("{}: stats {}", where, sub));
        json_record rec;
        rec["type"] = "stats_state";
        rec["enabled"] = on;
        out_.record(rec, on ? "statistics gathering on (window reset)" : "statistics gathering off (averages frozen)");
        return command_status::ok;
    }
    if (sub == "reset") {
        if (auto r = session_.reset_stats(); !r)
            return td_error(r.error(), fmt::format("{}: stats reset", where));
        json_record rec;
        rec["type"] = "stats_state";
        rec["enabled"] = session_.get_stats() ? session_.get_stats()->enabled : false;
        rec["reset"] = true;
        out_.record(rec, "statistics reset");
        return command_status::ok;
    }
    if (sub == "show") {
        auto st = session_.get_stats();
        if (!st)
            return td_error(st.error(), fmt::format("{}: stats show", where));
        print_stats(*st, nullptr, seconds_since_start());
        return command_status::ok;
    }
    return usage_error(where, fmt::format("unknown subcommand 'stats {}'; expected enable, disable, reset, show or watch",
                                          sub));
}

command_status runner::cmd_stats_watch(const words& w, const std::string& where)
{
    double interval = 1.0;
    std::optional<long long> count;
    for (std::size_t i = 2; i < w.size(); ++i) {
        if (w[i] == "--interval" && i + 1 < w.size()) {
            auto d = parse_duration(w[++i]);
            if (!d)
                return usage_error(where, fmt::format("bad interval '{}'", w[i]));
            interval = *d;
        } else if (w[i] == "--count" && i + 1 < w.size()) {
            count = parse_count(w[++i]);
            if (!count || *count == 0)
                return usage_error(where, fmt::format("bad count '{}'", w[i]));
        } else {
            return usage_error(where, "usage: stats watch [--interval SECONDS] [--count N]");
        }
    }
    if (!require_target(where))
        return command_status::failed;
    auto first = session_.get_stats();
    if (!first)
        return td_error(first.error(), fmt::format("{}: stats watch", where));
    bool was_enabled = first->enabled;
    if (!was_enabled) {
        session_.enable_stats(true);
        first = session_.get_stats();
    }
    if (session_.is_held())
        session_.resume();
    if (!out_.is_json())
        out_.record({}, fmt::format("{:>9} {:>8} {:>22} {:>22} {:>22} {:>22}", "time", "nthreads", "nrunnable",
                                    "a_concurrency", "nlwps", "nidle"));
    core::stat_averages prev = first->averages;
    long long rows = 0;
    command_status status = command_status::ok;
    while (!count || rows < *count) {
        auto end = run_until(interval, [&](const core::session_event& ev) {
            show(ev);
            return false;
        });
        if (end != run_end::timeout)
            break;
        auto st = session_.get_stats();
        if (!st) {
            status = td_error(st.error(), fmt::format("{}: stats watch", where));
            break;
        }
        core::stat_averages iv;
        iv.nrunnable = delta(st->averages.nrunnable, prev.nrunnable);
        iv.a_concurrency = delta(st->averages.a_concurrency, prev.a_concurrency);
        iv.nlwps = delta(st->averages.nlwps, prev.nlwps);
        iv.nidle = delta(st->averages.nidle, prev.nidle);
        iv.window_seconds = static_cast<double>(iv.nlwps.den) / 1e9;
        print_stats(*st, &iv, seconds_since_start());
        prev = st->averages;
        ++rows;
    }
    if (!was_enabled && has_target())
        session_.enable_stats(false);
    return status;
}

// ---------------------------------------------------------------- rusage / lwpinfo

std::optional<std::vector<tid_t>> runner::lwp_list(const std::string& arg, const std::string& where)
{
    if (arg.empty() || arg == "all") {
        auto tids = procfs::list_tasks(session_.pid());
        return tids;
    }
    auto tid = parse_count(arg);
    if (!tid || *tid == 0 || *tid > 0x7fffffff) {
        usage_error(where, fmt::format("'{}' is not a thread ID (a TID from `threads`) or all", arg));
        return std::nullopt;
    }
    return std::vector<tid_t>{tid_t{static_cast<pid_t>(*tid)}};
}

bool runner::print_rusage_row(tid_t lwp, const std::string& where, bool report_missing, std::optional<long> maxrss_kb)
{
    auto row = session_.rusage_collect_row(lwp, maxrss_kb);
    if (!row) {
        int err = row.error();
        if (!report_missing && err == ESRCH)
            return true;  // a thread that ended between listing and reading
        std::string why = err == ENOSYS ? "resource usage collection is not started (run `rusage start`)"
                          : err == ESRCH ? fmt::format("no thread {} in process {}", lwp.value, session_.pid())
                                         : std::strerror(err);
        out_.error(errno_name(err), fmt::format("{}: rusage collect {}: {} ({})", where, lwp.value, errno_name(err), why));
        return false;
    }
    const struct rusage* ru = &row->usage;
    const std::string& name = row->comm;
    json_record rec;
    rec["type"] = "rusage";
    rec["tid"] = lwp.value;
    rec["name"] = name;
    rec["ru_utime"] = core::to_seconds(ru->ru_utime);
    rec["ru_stime"] = core::to_seconds(ru->ru_stime);
    rec["ru_maxrss"] = ru->ru_maxrss;
    rec["ru_ixrss"] = nullptr;
    rec["ru_idrss"] = nullptr;
    rec["ru_isrss"] = nullptr;
    rec["ru_minflt"] = ru->ru_minflt;
    rec["ru_majflt"] = ru->ru_majflt;
    rec["ru_nswap"] = nullptr;
    rec["ru_inblock"] = ru->ru_inblock;
    rec["ru_oublock"] = ru->ru_oublock;
    rec["ru_msgsnd"] = nullptr;
    rec["ru_msgrcv"] = nullptr;
    rec["ru_nsignals"] = ru->ru_nsignals;
    rec["ru_nvcsw"] = ru->ru_nvcsw;
    rec["ru_nivcsw"] = ru->ru_nivcsw;
    rec["time"] = events::json_seconds(seconds_since_start());
    out_.record(rec, fmt::format("{:>7}  {:<16} {:>10.3f} {:>10.3f} {:>9} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}  "
                                 "n/a n/a n/a n/a n/a n/a",
                                 lwp.value, events::printable_name(name), core::to_seconds(ru->ru_utime),
                                 core::to_seconds(ru->ru_stime), ru->ru_maxrss, ru->ru_minflt, ru->ru_majflt,
                                 ru->ru_inblock, ru->ru_oublock, ru->ru_nvcsw, ru->ru_nivcsw, ru->ru_nsignals));
    return true;
}

command_status runner::cmd_rusage(const words& w, const std::string& where)
{
    if (w.size() < 2)
        return usage_error(where, "usage: rusage start|stop|collect [TID|all] [--interval S] [--count N]");
    const std::string& sub = w[1];
    if (!require_target(where))
        return command_status::failed;
    if (sub == "start" || sub == "stop") {
        if (w.size() != 2)
            return usage_error(where, fmt::format("usage: rusage {}", sub));
        if (sub == "start")
            session_.rusage_start();
        else
            session_.rusage_stop();
        json_record rec;
        rec["type"] = "rusage_state";
        rec["enabled"] = sub == "start";
        out_.record(rec, sub == "start" ? "resource usage collection on" : "resource usage collection off");
        return command_status::ok;
    }
    if (sub != "collect")
        return usage_error(where, fmt::format("unknown subcommand 'rusage {}'; expected start, stop or collect", sub));

    std::string which;
    std::optional<double> interval;
    std::optional<long long> count;
    for (std::size_t i = 2; i < w.size(); ++i) {
        if (w[i] == "--interval" && i + 1 < w.size()) {
            interval = parse_duration(w[++i]);
            if (!interval)
                return usage_error(where, fmt::format("bad interval '{}'", w[i]));
        } else if (w[i] == "--count" && i + 1 < w.size()) {
            count = parse_count(w[++i]);
            if (!count || *count == 0)
                return usage_error(where, fmt::format("bad count '{}'", w[i]));
        } else if (which.empty() && !w[i].starts_with("--")) {
            which = w[i];
        } else {
            return usage_error(where, "usage: rusage collect [TID|all] [--interval S] [--count N]");
        }
    }
    auto header = [&] {
        if (!out_.is_json())
            out_.record({}, fmt::format("{:>7}  {:<16} {:>10} {:>10} {:>9} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}  "
                                        "ixrss idrss isrss nswap msgsnd msgrcv",
                                        "TID", "NAME", "utime s", "stime s", "maxrss kB", "minflt", "majflt",
                                        "inblock", "oublock", "nvcsw", "nivcsw", "nsignals"));
    };
    auto one_round = [&]() -> bool {
        auto lwps = lwp_list(which, where);
        if (!lwps)
            return false;
        header();
        bool all = which.empty() || which == "all";
        output::bulk rows(out_);
        // VmHWM is the process's: read once per round, not once per row.
        long maxrss = core::process_maxrss_kb(session_.pid());
        for (tid_t t : *lwps)
            if (!print_rusage_row(t, where, !all, maxrss))
                return false;
        if (all) {
            // The process line: its times include threads that have exited.
            if (auto st = procfs::read_stat(session_.pid())) {
                double utime = static_cast<double>(st->utime) / core::clock_ticks_per_second();
                double stime = static_cast<double>(st->stime) / core::clock_ticks_per_second();
                events::json_record rec;
                rec["type"] = "rusage_process";
                rec["pid"] = session_.pid();
                rec["ru_utime"] = events::json_seconds(utime);
                rec["ru_stime"] = events::json_seconds(stime);
                rec["ru_minflt"] = st->minflt;
                rec["ru_majflt"] = st->majflt;
                out_.record(rec, fmt::format("{:>7}  {:<16} {:>10.3f} {:>10.3f}   (process total, incl. exited threads)",
                                             session_.pid(), "(process)", utime, stime));
            }
        }
        return true;
    };
    if (!interval) {
        if (count)
            return usage_error(where, "--count needs --interval");
        return one_round() ? command_status::ok : command_status::failed;
    }
    if (session_.is_held())
        session_.resume();
    for (long long n = 0; !count || n < *count; ++n) {
        auto end = run_until(*interval, [&](const core::session_event& ev) {
            show(ev);
            return false;
        });
        if (end != run_end::timeout)
            break;
        if (!one_round())
            return command_status::failed;
    }
    return command_status::ok;
}

command_status runner::cmd_lwpinfo(const words& w, const std::string& where)
{
    if (w.size() > 2)
        return usage_error(where, "usage: lwpinfo [TID|all]");
    if (!require_target(where))
        return command_status::failed;
    std::string which = w.size() == 2 ? w[1] : "all";
    auto lwps = lwp_list(which, where);
    if (!lwps)
        return command_status::failed;
    bool all = which == "all";
    output::bulk rows(out_);
    if (!out_.is_json())
        out_.record({}, fmt::format("{:>7}  {:<16} {:>14} {:>14}", "TID", "NAME", "lwp_utime s", "lwp_stime s"));
    for (tid_t t : *lwps) {
        auto info = session_.lwp_info_row(t);
        if (!info) {
            if (all)
                continue;
            out_.error(errno_name(info.error()), fmt::format("{}: lwpinfo {}: {} (no thread {} in process {})", where,
                                                             t.value, errno_name(info.error()), t.value, session_.pid()));
            return command_status::failed;
        }
        const std::string& name = info->comm;
        json_record rec;
        rec["type"] = "lwpinfo";
        rec["tid"] = t.value;
        rec["name"] = name;
        rec["lwp_utime"] = core::to_seconds(info->times.utime);
        rec["lwp_stime"] = core::to_seconds(info->times.stime);
        out_.record(rec, fmt::format("{:>7}  {:<16} {:>14.6f} {:>14.6f}", t.value, events::printable_name(name),
                                     core::to_seconds(info->times.utime), core::to_seconds(info->times.stime)));
    }
    return command_status::ok;
}

}  // namespace tdctl::cmd
