// Calls routed to libtdagent.so after it was loaded into a running process
// (`-p PID --agent`): the GOT slots of the modules loaded before it are
// rewritten once (core/inject/got_routing.hpp, journaled), and, when asked, the
// loader is followed (core/inject/late_routing.hpp: a trap byte at r_brk) so the
// modules it loads later are routed too, until detach.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "base/types.hpp"
#include "core/inject/got_routing.hpp"
#include "core/inject/late_routing.hpp"
#include "core/session/live_target.hpp"

namespace tdctl::core {

class agent_routing {
public:
    /// `target` must outlive this.
    explicit agent_routing(live_target& target) : target_(target) {}
    ~agent_routing();
    agent_routing(const agent_routing&) = delete;
    agent_routing& operator=(const agent_routing&) = delete;

    /// Routes the modules' calls to the agent (every thread stopped); with
    /// `follow_loads`, follows the loader to route the modules loaded later.
    /// Throws tdctl::error (target) when the agent is not the thread library.
    void route(bool follow_loads);
    /// What route() did; std::nullopt before.
    const std::optional<routing_tally>& tally() const { return tally_; }

    /// The loader is followed and `site` is its breakpoint.
    bool owns_site(target_addr site) const { return late_ && late_->owns_site(site); }
    /// A thread stopped at the loader's site: what it loaded or unloaded,
    /// routed; the thread stays stopped for the caller to resume.
    std::vector<routing_note> at_site(target_addr site) { return late_->at_site(site); }
    /// Stops following the loader (its breakpoint out; every thread stopped).
    void stop_following();
    /// The image or the process is gone: the loader's site went with it.
    void forget() { late_.reset(); }

private:
    live_target& target_;
    std::optional<routing_tally> tally_;
    std::unique_ptr<late_routing> late_;
};

}  // namespace tdctl::core
