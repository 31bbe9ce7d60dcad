#include "cmd/lock_view.hpp"

#include <fmt/format.h>

#include "cmd/records.hpp"
#include "events/event_sink.hpp"

namespace tdctl::cmd {

namespace {

double seconds(std::uint64_t ns)
{
    return static_cast<double>(ns) / 1e9;
}

double ms(std::uint64_t ns)
{
    return static_cast<double>(ns) / 1e6;
}

json_record tid_counts(const std::map<pid_t, std::uint64_t>& counts)
{
    json_record list = json_record::array();
    for (const auto& [tid, n] : counts)
        list.push_back(json_record{{"tid", tid}, {"contentions", n}});
    return list;
}

std::string tid_counts_text(const std::map<pid_t, std::uint64_t>& counts)
{
    std::string s;
    for (const auto& [tid, n] : counts)
        s += fmt::format("{}{} ({})", s.empty() ? "" : ", ", tid, n);
    return s.empty() ? "unknown" : s;
}

json_record site_json(const events::lock_call_site& site)
{
    json_record frames = json_record::array();
    for (const auto& f : site.frames)
        frames.push_back(events::frame_to_json(f));
    return json_record{{"contentions", site.contentions}, {"wait", seconds(site.wait_ns)}, {"frames", frames}};
}

std::uint64_t avg_ns(const events::lock_stats& s)
{
    return s.waits == 0 ? 0 : s.wait_ns / s.waits;
}

}  // namespace

json_record locks_report_record::json() const
{
    json_record rec;
    rec["type"] = "locks_report";
    rec["report"] = report;
    rec["span"] = events::json_seconds(span);
    rec["locks"] = locks;
    rec["shown"] = shown;
    rec["contentions"] = contentions;
    rec["try_failures"] = try_failures;
    rec["time"] = events::json_seconds(time);
    rec["unseen"] = unseen.empty() ? json_record(nullptr) : json_record(unseen);
    return rec;
}

std::string locks_report_record::text() const
{
    return fmt::format("locks: report {} over {:.3f} s: {} contended lock{}, {} contention{}, {} trylock failure{}{}{}",
                       report, span, locks, locks == 1 ? "" : "s", contentions, contentions == 1 ? "" : "s",
                       try_failures, try_failures == 1 ? "" : "s",
                       shown < locks ? fmt::format(" (top {} shown)", shown) : std::string(),
                       unseen.empty() ? std::string() : "\nlocks: " + unseen);
}

json_record lock_record::json() const
{
    json_record rec;
    rec["type"] = "lock";
    rec["report"] = report;
    rec["rank"] = rank;
    rec["address"] = events::hex_addr(stats.address);
    rec["symbol"] = where.symbol;
    rec["module"] = where.module;
    rec["kind"] = events::lock_kind_name(stats.kind);
    rec["contentions"] = stats.contentions;
    rec["try_failures"] = stats.try_failures;
    rec["waits"] = stats.waits;
    rec["wait_total"] = seconds(stats.wait_ns);
    rec["wait_avg"] = seconds(avg_ns(stats));
    rec["wait_max"] = seconds(stats.max_wait_ns);
    rec["pri_inherit"] = stats.pri_inherit;
    rec["holders"] = tid_counts(stats.holders);
    // A semaphore has no owner: its holder is the agent's last taker.
    rec["holders_inferred"] = stats.kind == events::lock_kind::semaphore;
    rec["waiters"] = tid_counts(stats.waiters);
    json_record sites = json_record::array();
    for (const auto& site : stats.call_sites)
        sites.push_back(site_json(site));
    rec["call_sites"] = std::move(sites);
    rec["call_site_count"] = stats.call_site_count;
    return rec;
}

std::string lock_record::text() const
{
    const auto& s = stats;
    std::string name = where.symbol.empty() ? std::string() : fmt::format(" {} ({})", where.symbol, where.module);
    std::string out = fmt::format(
        "locks: #{} {:#x}{} {}: contentions {}, trylock failures {}, waits {}, wait total {:.3f} ms, avg {:.3f} ms, "
        "max {:.3f} ms\n"
        "locks:    holders{} {}; waiters {}",
        rank, s.address, name, events::lock_kind_name(s.kind), s.contentions, s.try_failures, s.waits, ms(s.wait_ns),
        ms(avg_ns(s)), ms(s.max_wait_ns), s.kind == events::lock_kind::semaphore ? " (inferred: last taker)" : "",
        tid_counts_text(s.holders), tid_counts_text(s.waiters));
    for (std::size_t i = 0; i < s.call_sites.size(); ++i) {
        const auto& site = s.call_sites[i];
        out += fmt::format("\nlocks:    call site {} of {}: {}, wait {:.3f} ms", i + 1, s.call_site_count,
                           count_of(site.contentions, "contention"), ms(site.wait_ns));
        for (std::size_t f = 0; f < site.frames.size(); ++f)
            out += "\nlocks:    " + events::format_frame_text(static_cast<int>(f), site.frames[f]);
    }
    return out;
}

}  // namespace tdctl::cmd
