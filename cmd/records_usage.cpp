// The text and JSON renderings of the statistics, resource-usage and
// LWP-time records (`stats`, `rusage`, `lwpinfo`).
#include <fmt/format.h>

#include "cmd/records.hpp"
#include "core/accounting/lwp_usage.hpp"
#include "events/event_sink.hpp"

namespace tdctl::cmd {

namespace {

// A fraction as td_ta_stats_t holds it: both parts halved together until they fit in int.
struct int_fraction {
    int num = 0;
    int den = 0;
};

int_fraction reduced(const core::stat_fraction& f)
{
    int_fraction r;
    core::reduce_to_int(f.num, f.den, r.num, r.den);
    return r;
}

std::string fraction_text(const core::stat_fraction& f)
{
    auto r = reduced(f);
    return fmt::format("{:.2f} ({}/{})", f.value(), r.num, r.den);
}

std::string window_state(const core::thread_stats& st, const core::stat_averages& a)
{
    if (st.enabled)
        return "on";
    return a.window_seconds == 0.0 ? "off (`stats enable` starts a window)" : "off (averages frozen)";
}

}  // namespace

json_record stats_record::json() const
{
    const core::stat_averages& a = interval ? *interval : stats.averages;
    const auto nr = reduced(a.nrunnable), ac = reduced(a.a_concurrency), nl = reduced(a.nlwps), ni = reduced(a.nidle);
    json_record rec;
    rec["type"] = "stats";
    rec["nthreads"] = stats.td.nthreads;
    rec["r_concurrency"] = stats.td.r_concurrency;
    rec["nrunnable_num"] = nr.num;
    rec["nrunnable_den"] = nr.den;
    rec["a_concurrency_num"] = ac.num;
    rec["a_concurrency_den"] = ac.den;
    rec["nlwps_num"] = nl.num;
    rec["nlwps_den"] = nl.den;
    rec["nidle_num"] = ni.num;
    rec["nidle_den"] = ni.den;
    rec["nrunnable"] = a.nrunnable.value();
    rec["a_concurrency"] = a.a_concurrency.value();
    rec["nlwps"] = a.nlwps.value();
    rec["nidle"] = a.nidle.value();
    rec["window"] = events::json_seconds(a.window_seconds);
    rec["enabled"] = stats.enabled;
    rec["nthreads_source"] = stats.nthreads_source;
    rec["r_concurrency_source"] = stats.r_concurrency_source.empty() ? json_record(nullptr)
                                                                      : json_record(stats.r_concurrency_source);
    // The unreduced 64-bit parts: LWP·ns over ns.
    rec["ns"] = {{"nrunnable", {a.nrunnable.num, a.nrunnable.den}},
                 {"a_concurrency", {a.a_concurrency.num, a.a_concurrency.den}},
                 {"nlwps", {a.nlwps.num, a.nlwps.den}},
                 {"nidle", {a.nidle.num, a.nidle.den}}};
    rec["time"] = events::json_seconds(at);
    return rec;
}

std::string stats_record::text() const
{
    if (interval) {
        const core::stat_averages& a = *interval;
        return fmt::format("{:>9.3f} {:>8} {:>22} {:>22} {:>22} {:>22}", at, stats.td.nthreads,
                           fraction_text(a.nrunnable), fraction_text(a.a_concurrency), fraction_text(a.nlwps),
                           fraction_text(a.nidle));
    }
    const core::stat_averages& a = stats.averages;
    return fmt::format("nthreads       {} (from {})\n"
                       "r_concurrency  {}{}\n"
                       "nrunnable      {}\n"
                       "a_concurrency  {}\n"
                       "nlwps          {}\n"
                       "nidle          {}\n"
                       "window         {:.3f} s, gathering {}",
                       stats.td.nthreads, stats.nthreads_source, stats.td.r_concurrency,
                       stats.r_concurrency_source.empty()
                           ? " (glibc's __concurrency_level not found: install libc6-dbg for libc's debug symbols)"
                           : "",
                       fraction_text(a.nrunnable), fraction_text(a.a_concurrency), fraction_text(a.nlwps),
                       fraction_text(a.nidle), a.window_seconds, window_state(stats, a));
}

std::string stats_columns()
{
    return fmt::format("{:>9} {:>8} {:>22} {:>22} {:>22} {:>22}", "time", "nthreads", "nrunnable", "a_concurrency",
                       "nlwps", "nidle");
}

json_record stats_state_record::json() const
{
    json_record rec;
    rec["type"] = "stats_state";
    rec["enabled"] = enabled;
    if (reset)
        rec["reset"] = true;
    return rec;
}

std::string stats_state_record::text() const
{
    if (reset)
        return "statistics reset";
    return enabled ? "statistics gathering on (window reset)" : "statistics gathering off (averages frozen)";
}

json_record rusage_state_record::json() const
{
    json_record rec;
    rec["type"] = "rusage_state";
    rec["enabled"] = enabled;
    return rec;
}

std::string rusage_state_record::text() const
{
    return enabled ? "resource usage collection on" : "resource usage collection off";
}

json_record rusage_record::json() const
{
    json_record rec;
    rec["type"] = "rusage";
    rec["tid"] = tid;
    rec["name"] = name;
    rec["ru_utime"] = core::to_seconds(usage.ru_utime);
    rec["ru_stime"] = core::to_seconds(usage.ru_stime);
    rec["ru_maxrss"] = usage.ru_maxrss;
    rec["ru_ixrss"] = nullptr;
    rec["ru_idrss"] = nullptr;
    rec["ru_isrss"] = nullptr;
    rec["ru_minflt"] = usage.ru_minflt;
    rec["ru_majflt"] = usage.ru_majflt;
    rec["ru_nswap"] = nullptr;
    rec["ru_inblock"] = usage.ru_inblock;
    rec["ru_oublock"] = usage.ru_oublock;
    rec["ru_msgsnd"] = nullptr;
    rec["ru_msgrcv"] = nullptr;
    rec["ru_nsignals"] = usage.ru_nsignals;
    rec["ru_nvcsw"] = usage.ru_nvcsw;
    rec["ru_nivcsw"] = usage.ru_nivcsw;
    rec["time"] = events::json_seconds(time);
    return rec;
}

std::string rusage_record::text() const
{
    return fmt::format("{:>7}  {:<16} {:>10.3f} {:>10.3f} {:>9} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}  "
                       "n/a n/a n/a n/a n/a n/a",
                       tid, events::printable_name(name), core::to_seconds(usage.ru_utime),
                       core::to_seconds(usage.ru_stime), usage.ru_maxrss, usage.ru_minflt, usage.ru_majflt,
                       usage.ru_inblock, usage.ru_oublock, usage.ru_nvcsw, usage.ru_nivcsw, usage.ru_nsignals);
}

std::string rusage_columns()
{
    return fmt::format("{:>7}  {:<16} {:>10} {:>10} {:>9} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}  "
                       "ixrss idrss isrss nswap msgsnd msgrcv",
                       "TID", "NAME", "utime s", "stime s", "maxrss kB", "minflt", "majflt", "inblock", "oublock",
                       "nvcsw", "nivcsw", "nsignals");
}

json_record rusage_process_record::json() const
{
    json_record rec;
    rec["type"] = "rusage_process";
    rec["pid"] = pid;
    rec["ru_utime"] = events::json_seconds(utime);
    rec["ru_stime"] = events::json_seconds(stime);
    rec["ru_minflt"] = minflt;
    rec["ru_majflt"] = majflt;
    return rec;
}

std::string rusage_process_record::text() const
{
    return fmt::format("{:>7}  {:<16} {:>10.3f} {:>10.3f}   (process total, incl. exited threads)", pid, "(process)",
                       utime, stime);
}

json_record lwpinfo_record::json() const
{
    json_record rec;
    rec["type"] = "lwpinfo";
    rec["tid"] = tid;
    rec["name"] = name;
    rec["lwp_utime"] = utime;
    rec["lwp_stime"] = stime;
    return rec;
}

std::string lwpinfo_record::text() const
{
    return fmt::format("{:>7}  {:<16} {:>14.6f} {:>14.6f}", tid, events::printable_name(name), utime, stime);
}

std::string lwpinfo_columns()
{
    return fmt::format("{:>7}  {:<16} {:>14} {:>14}", "TID", "NAME", "lwp_utime s", "lwp_stime s");
}

}  // namespace tdctl::cmd
