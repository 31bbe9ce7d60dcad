#include "ptrace/site_table.hpp"

#include "base/log.hpp"

namespace tdctl::ptrace {

const breakpoint_site& site_table::add_breakpoint(target_addr addr, std::uint64_t function_size,
                                                  target_memory& memory, change_journal& journal)
{
    if (const breakpoint_site* site = add_reason(addr))
        return *site;
    return insert_new(std::make_unique<breakpoint_site>(addr, function_size), memory, journal);
}

const breakpoint_site& site_table::add_signal_site(target_addr addr, stop_flag flag, target_memory& memory,
                                                   change_journal& journal)
{
    if (const breakpoint_site* site = add_reason(addr))
        return *site;
    return insert_new(std::make_unique<breakpoint_site>(addr, flag), memory, journal);
}

const breakpoint_site* site_table::add_reason(target_addr addr)
{
    auto it = sites_.find(addr);
    if (it == sites_.end())
        return nullptr;
    ++it->second.reasons;
    return it->second.site.get();
}

const breakpoint_site& site_table::insert_new(std::unique_ptr<breakpoint_site> site, target_memory& memory,
                                              change_journal& journal)
{
    site->insert(memory, journal);
    if (log::debug_enabled())  // describe() formats a string: not on every hit
        log::debug("breakpoint {}", site->describe());
    target_addr addr = site->address();
    auto it = sites_.emplace(addr, entry{std::move(site), 1}).first;
    return *it->second.site;
}

breakpoint_site* site_table::drop_reason(target_addr addr)
{
    auto it = sites_.find(addr);
    if (it == sites_.end() || --it->second.reasons > 0)
        return nullptr;
    return it->second.site.get();
}

void site_table::erase(target_addr addr)
{
    sites_.erase(addr);
}

breakpoint_site* site_table::find(target_addr addr)
{
    auto it = sites_.find(addr);
    return it == sites_.end() ? nullptr : it->second.site.get();
}

const breakpoint_site* site_table::find(target_addr addr) const
{
    auto it = sites_.find(addr);
    return it == sites_.end() ? nullptr : it->second.site.get();
}

breakpoint_site* site_table::inserted_at(target_addr addr)
{
    breakpoint_site* site = find(addr);
    return site != nullptr && site->is_inserted() ? site : nullptr;
}

std::vector<target_addr> site_table::addresses() const
{
    std::vector<target_addr> out;
    out.reserve(sites_.size());
    for (const auto& [addr, e] : sites_)
        out.push_back(addr);
    return out;
}

std::vector<const breakpoint_site*> site_table::all() const
{
    std::vector<const breakpoint_site*> out;
    out.reserve(sites_.size());
    for (const auto& [addr, e] : sites_)
        out.push_back(e.site.get());
    return out;
}

void site_table::mark_withdrawn(target_addr addr)
{
    if (auto it = sites_.find(addr); it != sites_.end())
        it->second.withdrawn = true;
}

void site_table::reinsert_withdrawn(target_memory& memory, change_journal& journal, bool write)
{
    for (auto& [addr, e] : sites_) {
        if (!e.withdrawn)
            continue;
        e.withdrawn = false;
        if (write)
            e.site->insert(memory, journal);
    }
}

void site_table::write_saved_bytes(target_memory& copy) const
{
    // A signal-stop site's patched byte is its flag, not the function's code.
    for (const auto& [addr, e] : sites_)
        (void)e.site->restore_into(copy);
}

void site_table::remove_all(change_journal& journal)
{
    for (auto& [addr, e] : sites_)
        e.site->remove(journal);
    sites_.clear();
}

void site_table::forget_image()
{
    sites_.clear();
    report_ = {};
}

}  // namespace tdctl::ptrace
