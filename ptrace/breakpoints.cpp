#include "ptrace/breakpoints.hpp"

#include "base/log.hpp"
#include "ptrace/step_over.hpp"

namespace tdctl::ptrace {

breakpoints::breakpoints(site_table& sites, target_memory& memory, change_journal& journal, stepper& steps)
    : sites_(sites), memory_(memory), journal_(journal), steps_(steps)
{
}

const breakpoint_site& breakpoints::add(target_addr addr, std::uint64_t function_size)
{
    return sites_.add_breakpoint(addr, function_size, memory_, journal_);
}

const breakpoint_site& breakpoints::add_signal_site(target_addr addr, stop_flag flag)
{
    return sites_.add_signal_site(addr, flag, memory_, journal_);
}

void breakpoints::remove(target_addr addr)
{
    breakpoint_site* site = sites_.drop_reason(addr);
    if (site == nullptr)
        return;
    steps_.clear_threads_from(*site);
    site->remove(journal_);
    sites_.erase(addr);
}

void breakpoints::withdraw_all()
{
    steps_.park_trap_stops();
    for (target_addr addr : sites_.addresses()) {
        breakpoint_site* site = sites_.inserted_at(addr);
        if (site == nullptr)
            continue;
        steps_.clear_threads_from(*site);
        if (!site->remove(journal_))
            log::warning("could not put back the code at {}", addr);
        sites_.mark_withdrawn(addr);
    }
}

void breakpoints::reinsert_withdrawn()
{
    sites_.reinsert_withdrawn(memory_, journal_, true);
}

}  // namespace tdctl::ptrace
