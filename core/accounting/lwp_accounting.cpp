#include "core/accounting/lwp_accounting.hpp"

namespace tdctl::core {

std::uint64_t lwp_accounting::signals_of(tid_t lwp) const
{
    const auto* t = target_.process().find(lwp);
    return t != nullptr ? t->signals_received() : 0;
}

std::expected<lwp_rusage_row, int> lwp_accounting::rusage_collect_row(tid_t lwp, std::optional<long> maxrss_kb)
{
    if (!rusage_enabled_)
        return std::unexpected(ENOSYS);
    return read_lwp_rusage_row(target_.files(), target_.pid(), lwp, signals_of(lwp), maxrss_kb);
}

std::vector<std::expected<lwp_rusage_row, int>> lwp_accounting::rusage_collect_rows(const std::vector<tid_t>& lwps,
                                                                                    long maxrss_kb)
{
    if (!rusage_enabled_)
        return std::vector<std::expected<lwp_rusage_row, int>>(lwps.size(), std::unexpected(ENOSYS));
    std::vector<std::uint64_t> signals(lwps.size(), 0);
    for (std::size_t i = 0; i < lwps.size(); ++i)
        signals[i] = signals_of(lwps[i]);
    return read_lwp_rusage_rows(target_.files(), lwps, signals, maxrss_kb);
}

std::expected<struct rusage, int> lwp_accounting::rusage_collect(tid_t lwp)
{
    return member_of(rusage_collect_row(lwp, std::nullopt), &lwp_rusage_row::usage);
}

std::expected<lwp_times_row, int> lwp_accounting::lwp_info_row(tid_t lwp)
{
    return read_lwp_times_row(target_.files(), lwp);
}

std::vector<std::expected<lwp_times_row, int>> lwp_accounting::lwp_info_rows(const std::vector<tid_t>& lwps)
{
    return read_lwp_times_rows(target_.files(), lwps);
}

std::expected<lwp_times, int> lwp_accounting::lwp_info(tid_t lwp)
{
    return member_of(lwp_info_row(lwp), &lwp_times_row::times);
}

void lwp_accounting::open_usage_window(counter_depth depth, std::size_t named_rows)
{
    usage_.emplace(target_.files(), depth, target_.lwps(), named_rows);
}

window_usage lwp_accounting::take_usage_window()
{
    return usage_ ? usage_->take(target_.lwps()) : window_usage{};
}

void lwp_accounting::on_birth(tid_t lwp)
{
    stats_.on_birth(lwp);
    if (usage_)
        usage_->on_birth(lwp);
}

void lwp_accounting::on_death(tid_t lwp)
{
    stats_.on_death(lwp);
    if (usage_)
        usage_->on_death(lwp);
}

void lwp_accounting::on_vanished(tid_t lwp)
{
    stats_.on_vanished(lwp);
    if (usage_)
        usage_->on_vanished(lwp);
}

void lwp_accounting::on_exec(tid_t former, tid_t leader)
{
    stats_.on_exec(former, leader);
    if (usage_)
        usage_->on_exec(former, leader);
}

}  // namespace tdctl::core
