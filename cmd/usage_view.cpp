#include "cmd/usage_view.hpp"

#include <algorithm>
#include <utility>

namespace tdctl::cmd {

namespace {

constexpr std::pair<std::string_view, top_column> column_names[] = {
    {"cpu", top_column::cpu},         {"usr", top_column::usr},       {"sys", top_column::sys},
    {"wait", top_column::wait},       {"off", top_column::off},       {"cswch", top_column::cswch},
    {"nvcswch", top_column::nvcswch}, {"minflt", top_column::minflt}, {"majflt", top_column::majflt},
    {"tid", top_column::tid},         {"name", top_column::name},
};

// The number a row sorts by, highest first.
double sort_key(const top_record& r, top_column c)
{
    switch (c) {
    case top_column::cpu: return r.rates.usr + r.rates.sys;
    case top_column::usr: return r.rates.usr;
    case top_column::sys: return r.rates.sys;
    case top_column::wait: return r.rates.wait;
    case top_column::off: return r.rates.off;
    case top_column::cswch: return r.rates.cswch;
    case top_column::nvcswch: return r.rates.nvcswch;
    case top_column::minflt: return r.rates.minflt;
    case top_column::majflt: return r.rates.majflt;
    case top_column::tid:
    case top_column::name: break;
    }
    return 0;
}

// Whether `a` comes before `b`; ties in TID order, so the order is stable
// from one interval to the next.
bool before(const top_record& a, const top_record& b, top_column c)
{
    if (c == top_column::name && a.name != b.name)
        return a.name < b.name;
    if (c != top_column::tid && c != top_column::name) {
        const double ka = sort_key(a, c), kb = sort_key(b, c);
        if (ka != kb)
            return ka > kb;
    }
    return a.tid < b.tid;
}

// The CPU columns and the per-second rates add up over threads: those of
// the process as one process. %wait and %off do not (six blocked threads
// are not 600 % off CPU): process_line() makes them shares of thread time.
void add_rates(core::lwp_rates& sum, const core::lwp_rates& r)
{
    sum.usr += r.usr;
    sum.sys += r.sys;
    sum.cswch += r.cswch;
    sum.nvcswch += r.nvcswch;
    sum.minflt += r.minflt;
    sum.majflt += r.majflt;
}

double seconds(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }

double percent(std::uint64_t part_ns, std::uint64_t whole_ns)
{
    return whole_ns == 0 ? 0.0 : 100.0 * static_cast<double>(part_ns) / static_cast<double>(whole_ns);
}

// The process line of `w`: every thread's CPU and rates summed, its run-queue
// wait and off-CPU time as shares of the threads' time alive together.
top_process_record process_line(const core::window_usage& w, const top_view& view, double time)
{
    top_process_record p;
    p.pid = view.pid;
    p.name = view.name;
    p.threads = w.lwps.size();
    p.interval = seconds(w.window_ns);
    p.time = time;
    std::uint64_t alive_ns = 0, wait_ns = 0, off_ns = 0;
    for (const auto& u : w.lwps) {
        add_rates(p.rates, core::rates_of(u, w.window_ns));
        p.born += u.born ? 1 : 0;
        p.ended += u.ended ? 1 : 0;
        alive_ns += u.alive_ns;
        wait_ns += u.grown.wait_ns;
        off_ns += u.off_ns();
    }
    p.rates.wait = percent(wait_ns, alive_ns);
    p.rates.off = percent(off_ns, alive_ns);
    p.thread_seconds = seconds(alive_ns);
    return p;
}

}  // namespace

std::optional<top_column> parse_top_column(std::string_view word)
{
    for (const auto& [name, column] : column_names)
        if (name == word)
            return column;
    return std::nullopt;
}

top_interval top_table(const core::window_usage& w, const top_view& view, double time)
{
    const double interval = seconds(w.window_ns);
    top_interval out;
    out.process = process_line(w, view, time);
    for (const auto& u : w.lwps)
        out.rows.push_back(
            top_record{view.pid, u.tid.value, u.name, core::rates_of(u, w.window_ns), u.born, u.ended, interval, time});
    std::ranges::sort(out.rows, [&](const top_record& a, const top_record& b) { return before(a, b, view.order); });
    if (view.limit && out.rows.size() > static_cast<std::size_t>(*view.limit))
        out.rows.resize(static_cast<std::size_t>(*view.limit));
    return out;
}

std::vector<time_split_record> time_split_rows(const core::window_usage& w, const std::string& command, pid_t pid,
                                               double time, std::size_t max_rows)
{
    const auto order = core::split_rank_order(w);
    const double duration = seconds(w.window_ns);
    std::vector<time_split_record> rows;
    for (std::size_t i = 0; i < order.size(); ++i) {
        const auto& u = w.lwps[order[i]];
        if (i < max_rows || order.size() == max_rows + 1) {
            rows.push_back({command, pid, u.tid.value, u.name, 0, u.born, u.ended, seconds(u.grown.cpu_ns),
                            seconds(u.grown.wait_ns), seconds(u.off_ns()), duration, time});
            continue;
        }
        // The folded row's shares are of its threads' time together (each
        // one's life inside the run), so they add up to 100 % as a thread's do.
        if (i == max_rows)
            rows.push_back({command, pid, 0, {}, 0, false, false, 0, 0, 0, 0, time});
        time_split_record& rest = rows.back();
        rest.folded += 1;
        rest.duration += seconds(u.alive_ns);
        rest.on_cpu += seconds(u.grown.cpu_ns);
        rest.wait += seconds(u.grown.wait_ns);
        rest.off += seconds(u.off_ns());
    }
    return rows;
}

}  // namespace tdctl::cmd
