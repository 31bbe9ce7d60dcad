// Routing the modules a process loads while tdctl is attached with the agent
// (`-p PID --agent`): the loader is followed through a breakpoint at
// r_debug.r_brk (glibc's _dl_debug_state, core/inject/link_map.hpp). At each
// notification with the list consistent, modules that came are found and
// modules that went are forgotten. A new module's GOT is not relocated yet
// at that point (the loader announces the mapping first), so its slots are
// routed when its DT_INIT runs: a one-shot breakpoint there, the first code
// of the module the loader runs once every new module is relocated. Slots
// are journaled as at attach (change_kind::got_entry), each guarded by its
// module's link_map entry (l_addr), which glibc frees when it unloads it;
// the slots of a module that went are dropped from the journal, never
// written back.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/change_journal.hpp"
#include "base/types.hpp"
#include "core/inject/got_routing.hpp"
#include "core/inject/link_map.hpp"
#include "ptrace/traced_process.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::core {

/// What late routing did with one module, for the session's output.
struct routing_note {
    enum class kind {
        routed,    ///< a module loaded after the attach had `slots` slots routed
        unloaded,  ///< a routed module was unloaded: its `slots` journal entries dropped, nothing written back
        problem,   ///< a module could not be routed: `detail` says why
    };
    kind what = kind::routed;
    std::string module;       ///< file name (l_name's last component)
    std::size_t slots = 0;
    std::string detail;
};

/// The journal guard of a module's slots: its link_map entry's l_addr still
/// holds the load bias.
change_guard module_guard(const link_map_entry& module);

class late_routing {
public:
    /// Starts following the loader: plants a breakpoint at rv.r_brk
    /// (journaled code). `modules` are the session's (the agent and libc are
    /// looked up there; it must outlive this), `present` the list at the
    /// attach and `first_pass` what route_to_agent() routed in it. Throws
    /// tdctl::error when the breakpoint cannot be written.
    late_routing(ptrace::traced_process& process, const symbols::module_set& modules, const loader_rendezvous& rv,
                 const std::vector<link_map_entry>& present, const routing_tally& first_pass);
    late_routing(const late_routing&) = delete;
    late_routing& operator=(const late_routing&) = delete;

    /// True for the r_brk breakpoint and the pending DT_INIT ones.
    bool owns_site(target_addr site) const;
    /// A thread trapped at one of its sites (left stopped: the caller resumes
    /// it). Returns what a user should see.
    std::vector<routing_note> at_site(target_addr site);
    /// Removes its breakpoints (call with every thread stopped); the routed
    /// slots stay journaled for the detach to put back.
    void stop();

private:
    struct known_module {
        std::string name;
        target_addr entry;                 ///< its link_map entry
        std::vector<target_addr> slots;    ///< journaled
    };
    struct pending_module {
        link_map_entry module;
        std::optional<target_addr> init_site;  ///< planted at its DT_INIT; none: routed at the next notification
    };
    std::vector<routing_note> at_notification();
    /// The list is consistent: drop what went, note what came (routed at its DT_INIT).
    std::vector<routing_note> take_list(const std::vector<link_map_entry>& list);
    void forget_unloaded(const std::vector<link_map_entry>& list, std::vector<routing_note>& notes);
    void add_pending(const link_map_entry& module);
    /// Routes every pending module (relocated by now) and removes their sites.
    std::vector<routing_note> route_pending();
    void remove_init_sites();

    ptrace::traced_process& process_;
    const symbols::module_set& modules_;
    loader_rendezvous rv_;
    std::map<std::uint64_t, known_module> known_;     ///< by load bias: routed, or passed by on purpose
    std::map<std::uint64_t, pending_module> pending_; ///< by load bias: mapped, not relocated yet
    bool planted_ = false;
};

}  // namespace tdctl::core
