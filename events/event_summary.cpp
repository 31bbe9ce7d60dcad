#include "events/event_summary.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/clock.hpp"

namespace tdctl::events {

namespace {

struct open_thread {
    std::uint64_t call_site;
    std::uint64_t start_routine;
    std::uint64_t born_ns;
};

std::vector<lifetime_stats> lifetime_rows(std::map<std::uint64_t, std::vector<std::uint64_t>>& by_routine)
{
    std::vector<lifetime_stats> rows;
    for (auto& [routine, ns] : by_routine) {
        std::sort(ns.begin(), ns.end());
        rows.push_back({routine, ns.size(), ns.front(), percentile(ns, 0.5), percentile(ns, 0.95), ns.back()});
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const lifetime_stats& a, const lifetime_stats& b) { return a.count > b.count; });
    return rows;
}

}  // namespace

std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double fraction)
{
    if (sorted.empty())
        return 0;
    // Nearest rank: the smallest value with at least `fraction` of the values at or below it.
    auto rank = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(sorted.size())));
    return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

event_summary::event_summary(std::function<std::uint64_t(const event_message&)> start_routine_of)
    : start_routine_of_(std::move(start_routine_of))
{
}

void event_summary::write(const event_message& msg)
{
    entry e{msg.event, msg.tid.value, monotonic_ns_at(msg.time), msg.call_site.value, 0};
    if (msg.event == TD_CREATE && start_routine_of_)
        e.start_routine = start_routine_of_(msg);
    log_.push_back(e);
}

summary_counts event_summary::counts(std::size_t from) const
{
    summary_counts c;
    std::unordered_map<pid_t, open_thread> open;
    std::map<std::uint64_t, call_site_count> sites;
    std::map<std::uint64_t, std::vector<std::uint64_t>> lifetimes;
    for (std::size_t i = from; i < log_.size(); ++i) {
        const entry& e = log_[i];
        ++c.messages;
        if (e.event >= 0 && e.event <= TD_MAX_EVENT_NUM)
            ++c.per_event[static_cast<std::size_t>(e.event)];
        if (e.event == TD_CREATE) {
            ++c.created;
            auto& site = sites[e.call_site];
            site.call_site = e.call_site;
            ++site.created;
            open[e.tid] = open_thread{e.call_site, e.start_routine, e.time_ns};
        } else if (e.event == TD_DEATH) {
            ++c.ended;
            auto it = open.find(e.tid);
            if (it == open.end())
                continue;
            ++sites[it->second.call_site].ended;
            lifetimes[it->second.start_routine].push_back(e.time_ns - std::min(e.time_ns, it->second.born_ns));
            open.erase(it);
        }
    }
    c.created_alive = open.size();
    for (const auto& [addr, site] : sites)
        c.call_sites.push_back(site);
    std::stable_sort(c.call_sites.begin(), c.call_sites.end(),
                     [](const call_site_count& a, const call_site_count& b) { return a.created > b.created; });
    c.lifetimes = lifetime_rows(lifetimes);
    return c;
}

}  // namespace tdctl::events
