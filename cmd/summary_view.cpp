#include "cmd/summary_view.hpp"

#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "cmd/records.hpp"
#include "events/event_names.hpp"
#include "symbols/demangle.hpp"

namespace tdctl::cmd {

namespace {

std::string where_text(const code_location& w, std::uint64_t addr)
{
    if (addr == 0)
        return "unknown";
    if (w.symbol.empty())
        return fmt::format("{:#x}{}", addr, w.module.empty() ? "" : fmt::format(" ({})", w.module));
    return fmt::format("{} ({})", w.symbol, w.module);
}

json_record nullable_addr(std::uint64_t addr)
{
    return addr == 0 ? json_record(nullptr) : json_record(events::hex_addr(addr));
}

double ms(std::uint64_t ns)
{
    return static_cast<double>(ns) / 1e6;
}

}  // namespace

code_location locate(core::session& session, std::uint64_t addr)
{
    code_location w;
    if (addr == 0)
        return w;
    const auto* set = session.target().modules_holding(target_addr{addr});
    const auto* m = set != nullptr ? set->containing(target_addr{addr}) : nullptr;
    if (m == nullptr)
        return w;
    w.module = m->soname();
    w.symbol = symbols::demangled(set->describe(target_addr{addr}));
    return w;
}

json_record summary_record::json() const
{
    json_record rec;
    rec["type"] = "summary";
    rec["command"] = command;
    rec["messages"] = counts.messages;
    json_record per = json_record::object();
    for (std::size_t e = 0; e < counts.per_event.size(); ++e)
        if (counts.per_event[e] != 0)
            per[events::event_name(static_cast<td_event_e>(e))] = counts.per_event[e];
    rec["events"] = std::move(per);
    rec["created"] = counts.created;
    rec["ended"] = counts.ended;
    rec["created_alive"] = counts.created_alive;
    rec["alive"] = alive;
    rec["call_sites"] = counts.call_sites.size();
    rec["time"] = events::json_seconds(time);
    return rec;
}

std::string summary_record::text() const
{
    std::string per;
    for (std::size_t e = 0; e < counts.per_event.size(); ++e)
        if (counts.per_event[e] != 0)
            per += fmt::format("{}{} {}", per.empty() ? "" : ", ", events::event_name(static_cast<td_event_e>(e)),
                               counts.per_event[e]);
    return fmt::format("{}: summary of {} ({}); threads created {}, ended {}, created and still alive {}; "
                       "threads alive now {}",
                       command, count_of(counts.messages, "message"), per.empty() ? "none" : per, counts.created,
                       counts.ended,
                       counts.created_alive, alive);
}

json_record call_site_record::json() const
{
    json_record rec;
    rec["type"] = "summary_call_site";
    rec["command"] = command;
    rec["rank"] = rank;
    rec["call_site"] = nullable_addr(site.call_site);
    rec["symbol"] = where.symbol;
    rec["module"] = where.module;
    rec["created"] = site.created;
    rec["ended"] = site.ended;
    return rec;
}

std::string call_site_record::text() const
{
    return fmt::format("{}: {:>9} {:>9}  {}", command, site.created, site.ended, where_text(where, site.call_site));
}

json_record lifetime_record::json() const
{
    json_record rec;
    rec["type"] = "summary_lifetime";
    rec["command"] = command;
    rec["start_routine"] = nullable_addr(stats.start_routine);
    rec["symbol"] = where.symbol;
    rec["module"] = where.module;
    rec["count"] = stats.count;
    for (auto [key, ns] : {std::pair{"min", stats.min_ns}, std::pair{"median", stats.median_ns},
                           std::pair{"p95", stats.p95_ns}, std::pair{"max", stats.max_ns}})
        rec[key] = static_cast<double>(ns) / 1e9;
    return rec;
}

std::string lifetime_record::text() const
{
    return fmt::format("{}: {:>9} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f}  {}", command, stats.count,
                       ms(stats.min_ns), ms(stats.median_ns), ms(stats.p95_ns), ms(stats.max_ns),
                       where_text(where, stats.start_routine));
}

std::string call_site_heading(const std::string& command, std::size_t shown, std::size_t total)
{
    return fmt::format("{}: threads per creating call site ({} of {}):\n{}: {:>9} {:>9}  call site", command, shown,
                       total, command, "created", "ended");
}

std::string lifetime_heading(const std::string& command)
{
    return fmt::format("{}: thread lifetimes per start routine, ms:\n{}: {:>9} {:>10} {:>10} {:>10} {:>10}  start "
                       "routine",
                       command, command, "count", "min", "median", "p95", "max");
}

}  // namespace tdctl::cmd
