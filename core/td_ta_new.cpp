// td_ta_new: choose the backend that publishes the event protocol.
#include "core/thread_agent.hpp"
#include "core/protocol/thread_backend.hpp"
#include "core/thread_handle.hpp"

namespace tdctl::core {

thread_agent::thread_agent(target_access& target, protocol_layout layout)
    : protocol_(target, std::move(layout)), backend_(make_thread_backend(*this))
{
}

thread_agent::~thread_agent() = default;

td_result<std::unique_ptr<thread_agent>> thread_agent::create(target_access& target, std::string* why,
                                                              bool consider_tdagent)
{
    // tdagent serves every event it reports, create and death included, so
    // when it is loaded nptl is not used at all: no event is reported twice.
    std::string agent_reason, nptl_reason;
    if (consider_tdagent && target.has_module("libtdagent.so")) {
        if (auto layout = probe_tdagent(target, agent_reason))
            return std::make_unique<thread_agent>(target, std::move(*layout));
    }
    if (auto layout = probe_nptl(target, nptl_reason))
        return std::make_unique<thread_agent>(target, std::move(*layout));
    if (why != nullptr)
        *why = agent_reason.empty() ? nptl_reason : agent_reason + "; " + nptl_reason;
    return td_fail(TD_NOLIBTHREAD);
}

std::unique_ptr<thread_backend> make_thread_backend(thread_agent& agent)
{
    return agent.backend() == "tdagent" ? make_tdagent_backend(agent) : make_nptl_backend(agent);
}

std::vector<td_event_e> thread_agent::supported_events() const
{
    std::vector<td_event_e> out;
    for (const auto& [e, addr] : layout().event_addresses)
        out.push_back(e);
    return out;
}

}  // namespace tdctl::core
