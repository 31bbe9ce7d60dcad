#include "core/inject/late_routing.hpp"

#include <algorithm>
#include <exception>

#include <fmt/format.h>

#include "base/log.hpp"
#include "core/session/held_target.hpp"

namespace tdctl::core {

namespace {

std::string file_name(const std::string& path)
{
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Modules routing passes by, told by name before any file is opened: libc,
// the loader, the agent (got_routing's list), and the kernel's vDSO.
bool is_passed_by(const link_map_entry& m)
{
    std::string name = file_name(m.name);
    return name.empty() || name.starts_with("libc.so") || name.starts_with("ld-linux") ||
           name.starts_with("ld64.so") || name.starts_with("libtdagent.so") || name.starts_with("linux-vdso") ||
           name.starts_with("linux-gate");
}

const symbols::elf_module* module_at(const symbols::module_set& set, target_addr load_bias)
{
    for (const auto& m : set.modules())
        if (m->load_bias() == load_bias)
            return m.get();
    return nullptr;
}

}  // namespace

change_guard module_guard(const link_map_entry& module)
{
    return change_guard::on(l_addr_field(module), module.l_addr.value);
}

late_routing::late_routing(ptrace::traced_process& process, const symbols::module_set& modules,
                           const loader_rendezvous& rv, const std::vector<link_map_entry>& present,
                           const routing_tally& first_pass)
    : process_(process), modules_(modules), rv_(rv)
{
    for (const auto& m : present) {
        known_module k{file_name(m.name), m.entry, {}};
        for (const auto& r : first_pass.routed)
            if (r.load_bias == m.l_addr)
                k.slots = r.slots;
        known_[m.l_addr.value] = std::move(k);
    }
    process_.sites().add(rv_.r_brk, rv_.r_brk_size);
    planted_ = true;
}

bool late_routing::owns_site(target_addr site) const
{
    if (!planted_)
        return false;
    if (site == rv_.r_brk)
        return true;
    return std::any_of(pending_.begin(), pending_.end(),
                       [&](const auto& p) { return p.second.init_site == std::optional<target_addr>(site); });
}

std::vector<routing_note> late_routing::at_site(target_addr site)
{
    if (site == rv_.r_brk)
        return at_notification();
    return route_pending();
}

std::vector<routing_note> late_routing::at_notification()
{
    auto state = read_link_map_state(process_.memory(), rv_);
    if (state == link_map_state::deleting) {
        // Modules are about to be unmapped: no breakpoint may stay in one.
        remove_init_sites();
        return {};
    }
    if (state != link_map_state::consistent)
        return {};
    std::vector<routing_note> notes;
    // Pending modules without a DT_INIT breakpoint were relocated by the
    // load that mapped them, which is over by the next notification.
    if (!pending_.empty())
        notes = route_pending();
    auto list = read_link_map(process_.memory(), rv_);
    if (!list) {
        log::warning("the loader's list of modules cannot be read; modules loaded now are not routed");
        return notes;
    }
    auto more = take_list(*list);
    notes.insert(notes.end(), more.begin(), more.end());
    return notes;
}

std::vector<routing_note> late_routing::take_list(const std::vector<link_map_entry>& list)
{
    std::vector<routing_note> notes;
    forget_unloaded(list, notes);
    for (const auto& m : list) {
        if (known_.contains(m.l_addr.value) || pending_.contains(m.l_addr.value))
            continue;
        if (is_passed_by(m)) {
            known_[m.l_addr.value] = known_module{file_name(m.name), m.entry, {}};
            continue;
        }
        add_pending(m);
    }
    return notes;
}

void late_routing::forget_unloaded(const std::vector<link_map_entry>& list, std::vector<routing_note>& notes)
{
    auto is_present = [&](std::uint64_t bias, target_addr entry) {
        return std::any_of(list.begin(), list.end(),
                           [&](const link_map_entry& m) { return m.l_addr.value == bias && m.entry == entry; });
    };
    for (auto it = known_.begin(); it != known_.end();) {
        if (is_present(it->first, it->second.entry)) {
            ++it;
            continue;
        }
        // Its memory is gone or will be another module's: never written back.
        for (target_addr slot : it->second.slots)
            process_.journal().forget(slot);
        if (!it->second.slots.empty()) {
            log::debug("{} unloaded: {} routed GOT slots dropped from the journal", it->second.name,
                       it->second.slots.size());
            notes.push_back(routing_note{routing_note::kind::unloaded, it->second.name, it->second.slots.size(), {}});
        }
        it = known_.erase(it);
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (is_present(it->first, it->second.module.entry)) {
            ++it;
            continue;
        }
        // Unloaded before it ran (a failed dlopen): its site went at RT_DELETE
        // already; the journal's byte check covers one that did not.
        if (it->second.init_site) {
            process_.stop_all();
            process_.sites().remove(*it->second.init_site);
            process_.release_all();
        }
        it = pending_.erase(it);
    }
}

void late_routing::add_pending(const link_map_entry& module)
{
    pending_module p{module, read_init_function(process_.memory(), module)};
    if (p.init_site) {
        try {
            process_.sites().add(*p.init_site, 0);
        } catch (const std::exception& e) {
            log::warning("{}: no breakpoint at its DT_INIT ({}); routed at the loader's next notification",
                         module.name, e.what());
            p.init_site.reset();
        }
    }
    log::debug("{} loaded at {:#x}; routed at {}", module.name, module.l_addr.value,
               p.init_site ? fmt::format("its DT_INIT {:#x}", p.init_site->value) : "the next notification");
    pending_[module.l_addr.value] = std::move(p);
}

std::vector<routing_note> late_routing::route_pending()
{
    std::vector<routing_note> notes;
    if (pending_.empty())
        return notes;
    // Every thread held: the slots change under no running caller, and the
    // sites go with no thread between trap and report.
    held_target held(process_, "after routing");
    remove_init_sites();
    auto mapped = symbols::module_set::load(process_.pid());
    for (auto& [bias, p] : pending_) {
        std::string name = file_name(p.module.name);
        const auto* m = module_at(mapped, p.module.l_addr);
        if (m == nullptr) {
            notes.push_back(routing_note{routing_note::kind::problem, name, 0, "its file could not be opened"});
            known_[bias] = known_module{name, p.module.entry, {}};
            continue;
        }
        routing_tally tally;
        route_module_to_agent(*m, modules_, process_.journal(), process_.memory(), module_guard(p.module), tally);
        known_module k{name, p.module.entry, {}};
        if (!tally.routed.empty())
            k.slots = tally.routed.front().slots;
        for (const auto& problem : tally.problems)
            notes.push_back(routing_note{routing_note::kind::problem, name, 0, problem});
        if (!k.slots.empty())
            notes.push_back(routing_note{routing_note::kind::routed, name, k.slots.size(), {}});
        known_[bias] = std::move(k);
    }
    pending_.clear();
    return notes;
}

void late_routing::remove_init_sites()
{
    bool held = false;
    for (auto& [bias, p] : pending_) {
        if (!p.init_site)
            continue;
        if (!held) {
            process_.stop_all();
            held = true;
        }
        process_.sites().remove(*p.init_site);
        p.init_site.reset();
    }
    if (held)
        process_.release_all();
}

void late_routing::stop()
{
    if (!planted_)
        return;
    remove_init_sites();
    process_.sites().remove(rv_.r_brk);
    planted_ = false;
}

}  // namespace tdctl::core
