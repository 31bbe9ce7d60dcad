// `summary`: the event messages printed so far, counted (events/event_summary);
// the same records end each `watch` for its own messages.
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "cmd/commands.hpp"
#include "cmd/summary_view.hpp"

namespace tdctl::cmd {

namespace {

// N of "--top N" / "--top=N"; std::nullopt when the words are not that.
std::optional<std::size_t> parse_top(const words& w)
{
    std::string value;
    if (w.size() == 1)
        return summary_default_top;
    if (w.size() == 2 && w[1].starts_with("--top="))
        value = w[1].substr(6);
    else if (w.size() == 3 && w[1] == "--top")
        value = w[2];
    else
        return std::nullopt;
    std::size_t n = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size() || n == 0)
        return std::nullopt;
    return n;
}

}  // namespace

void print_summary(command_context& c, const std::string& command, const events::summary_counts& counts,
                   std::size_t top)
{
    const std::size_t shown = std::min(top, counts.call_sites.size());
    output::bulk batch(c.out);
    const std::size_t alive = c.target.has_target() ? c.session().target().lwps().size() : 0;
    c.out.print(summary_record{command, counts, alive, shown, seconds_since_start()});
    if (shown > 0)
        c.out.heading(call_site_heading(command, shown, counts.call_sites.size()));
    for (std::size_t i = 0; i < shown; ++i) {
        const auto& site = counts.call_sites[i];
        c.out.print(call_site_record{command, i + 1, site, locate(c.session(), site.call_site)});
    }
    if (!counts.lifetimes.empty())
        c.out.heading(lifetime_heading(command));
    for (const auto& l : counts.lifetimes)
        c.out.print(lifetime_record{command, l, locate(c.session(), l.start_routine)});
}

command_status cmd_summary(command_context& c, const words& w, const std::string& where)
{
    auto top = parse_top(w);
    if (!top)
        return c.check.usage_error(where, "usage: summary [--top N]");
    print_summary(c, "summary", c.summary.counts(), *top);
    return command_status::ok;
}

}  // namespace tdctl::cmd
