// The text and JSON renderings of `top`'s rows and of the on-CPU / run-queue
// / off-CPU split at the end of `watch` and `sleep`.
#include <fmt/format.h>

#include "cmd/records.hpp"
#include "events/event_sink.hpp"

namespace tdctl::cmd {

namespace {

// The columns after TGID and TID, laid out like `pidstat -t -u -w -r`.
std::string rate_columns(const core::lwp_rates& r)
{
    return fmt::format("{:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>8.2f}", r.usr, r.sys,
                       r.wait, r.off, r.cswch, r.nvcswch, r.minflt, r.majflt);
}

// The names of a record's %wait and %off in JSON: a thread's are percent of
// the interval; the process line's, shares of its threads' time.
struct wait_off_keys {
    const char* wait;
    const char* off;
};

// A `top` or `top_process` record: its own fields between the type and pid
// and the rates, interval and time every such record has.
json_record top_json(const char* type, pid_t pid, const json_record& own, const core::lwp_rates& r,
                     wait_off_keys keys, double interval, double time)
{
    json_record rec{{"type", type}, {"pid", pid}};
    rec.update(own);
    rec.update(json_record{{"usr", r.usr},
                           {"sys", r.sys},
                           {keys.wait, r.wait},
                           {keys.off, r.off},
                           {"cswch_per_s", r.cswch},
                           {"nvcswch_per_s", r.nvcswch},
                           {"minflt_per_s", r.minflt},
                           {"majflt_per_s", r.majflt},
                           {"interval", events::json_seconds(interval)},
                           {"time", events::json_seconds(time)}});
    return rec;
}

// "born", "ended", "born, ended" or "".
std::string lifetime_note(bool born, bool ended)
{
    if (born && ended)
        return "born, ended";
    return born ? "born" : ended ? "ended" : "";
}

std::string percent_of(double part, double whole)
{
    return fmt::format("{:.1f}%", whole > 0 ? 100.0 * part / whole : 0.0);
}

}  // namespace

json_record top_record::json() const
{
    return top_json("top", pid, {{"tid", tid}, {"name", name}, {"born", born}, {"ended", ended}}, rates,
                    {"wait", "off"}, interval, time);
}

std::string top_record::text() const
{
    const std::string note = lifetime_note(born, ended);
    return fmt::format("{:>9.3f} {:>8} {:>8} {}  |__{}{}", time, "-", tid, rate_columns(rates),
                       events::printable_name(name), note.empty() ? "" : " (" + note + ")");
}

json_record top_process_record::json() const
{
    return top_json("top_process", pid,
                    {{"name", name},
                     {"threads", threads},
                     {"born", born},
                     {"ended", ended},
                     {"thread_seconds", events::json_seconds(thread_seconds)}},
                    rates, {"wait_share", "off_share"}, interval, time);
}

std::string top_process_record::text() const
{
    // Its %wait and %off are not a thread's: the line says what they are of.
    return fmt::format("{:>9.3f} {:>8} {:>8} {}  {} ({}, {} born, {} ended; %wait, %off of {:.2f} thread-seconds)",
                       time, pid, "-", rate_columns(rates), events::printable_name(name), count_of(threads, "thread"),
                       born, ended, thread_seconds);
}

std::string top_columns()
{
    return fmt::format("{:>9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8}  {}", "time", "TGID", "TID",
                       "%usr", "%sys", "%wait", "%off", "cswch/s", "nvcswch/s", "minflt/s", "majflt/s", "Command");
}

json_record time_split_record::json() const
{
    json_record rec;
    rec["type"] = "time_split";
    rec["command"] = command;
    rec["pid"] = pid;
    rec["tid"] = folded != 0 ? json_record(nullptr) : json_record(tid);
    if (folded != 0)
        rec["threads"] = folded;
    else
        rec["name"] = name;
    rec["born"] = born;
    rec["ended"] = ended;
    rec["on_cpu"] = events::json_seconds(on_cpu);
    rec["wait"] = events::json_seconds(wait);
    rec["off"] = events::json_seconds(off);
    rec["duration"] = events::json_seconds(duration);
    rec["time"] = events::json_seconds(time);
    return rec;
}

std::string time_split_record::text() const
{
    const std::string note = lifetime_note(born, ended);
    const std::string who = folded != 0 ? fmt::format("{} more thread{}", folded, folded == 1 ? "" : "s")
                                        : fmt::format("thread {} ({}{})", tid, events::printable_name(name),
                                                      note.empty() ? "" : ", " + note);
    return fmt::format("{}: {}: on CPU {:.3f} s ({}), run-queue wait {:.3f} s ({}), off CPU {:.3f} s ({})", command,
                       who, on_cpu, percent_of(on_cpu, duration), wait, percent_of(wait, duration), off,
                       percent_of(off, duration));
}

std::string time_split_heading(const std::string& command, double duration)
{
    return fmt::format("{}: each thread's time over {:.3f} s: on CPU, waiting for a CPU, off CPU (blocked)", command,
                       duration);
}

}  // namespace tdctl::cmd
