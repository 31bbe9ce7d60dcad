#include "core/inject/agent_routing.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "core/inject/link_map.hpp"

namespace tdctl::core {

agent_routing::~agent_routing() = default;

void agent_routing::route(bool follow_loads)
{
    thread_agent* agent = target_.agent();
    if (agent == nullptr || agent->backend() != "tdagent")
        throw error::target(fmt::format(
            "--agent: libtdagent.so is not in the target after loading it ({})",
            target_.has_module("libtdagent.so") ? target_.no_agent_reason()
                                                : "no module exports __tdagent_version"));
    // Each module's slots are guarded by its link_map entry, which the
    // loader frees when it unloads the module.
    auto rendezvous = find_loader_rendezvous(target_);
    auto present = rendezvous ? read_link_map(target_.memory(), *rendezvous) : std::nullopt;
    auto guard = [&](const symbols::elf_module& m) -> std::optional<change_guard> {
        if (present)
            for (const auto& entry : *present)
                if (entry.l_addr == m.load_bias())
                    return module_guard(entry);
        return std::nullopt;
    };
    auto& process = target_.process();
    tally_ = route_to_agent(target_.modules(), process.journal(), process.memory(), guard);
    for (const auto& p : tally_->problems)
        log::warning("routing to the agent: {}", p);
    log::debug("routed {} GOT slots in {} modules to the agent ({} already bound to it)", tally_->slots,
               tally_->modules, tally_->already);
    // Following the loader takes a trap byte at r_brk: only when asked.
    if (!follow_loads)
        return;
    if (!present) {
        log::warning("the loader's list of modules cannot be read: modules loaded from now on are not routed");
        return;
    }
    late_ = std::make_unique<late_routing>(process, target_.modules(), *rendezvous, *present, *tally_);
}

void agent_routing::stop_following()
{
    if (!late_)
        return;
    if (target_.process().is_alive())
        late_->stop();
    late_.reset();
}

}  // namespace tdctl::core
