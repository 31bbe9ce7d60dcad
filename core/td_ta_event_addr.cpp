// td_ta_event_addr: where a thread reports event e (seed 002).
#include "core/thread_agent.hpp"

namespace tdctl::core {

td_result<reporting_address> thread_agent::reporting_address_of(td_event_e e) const
{
    auto it = layout().event_addresses.find(e);
    if (it == layout().event_addresses.end())
        return td_fail(TD_NOEVENT);
    return it->second;
}

td_result<td_notify_t> thread_agent::event_addr(td_event_e e) const
{
    auto addr = reporting_address_of(e);
    if (!addr)
        return td_fail(addr.error());
    td_notify_t n{};
    n.type = NOTIFY_BPT;
    n.u.bptaddr = reinterpret_cast<psaddr_t>(addr->address.value);
    return n;
}

}  // namespace tdctl::core
