// Routing already-bound pthread and signal calls to libtdagent.so when the
// agent came after the modules that make them (dlopen()ed, not preloaded):
// interposition reaches only modules bound after it, so the GOT slots of the
// others are pointed at the agent's wrappers. Every write goes through the
// change journal (change_kind::got_entry), so detach and the crash restore
// put each slot back.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/change_journal.hpp"
#include "base/target_memory.hpp"
#include "core/target_access.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::core {

/// The functions libtdagent.so interposes (its exported wrappers of libc's
/// pthread and signal calls, agent/*.c): the imports routing rewrites.
std::span<const std::string_view> agent_wrapped_functions();

/// The slots routing rewrote in one module (journaled, kind got_entry).
struct routed_module {
    std::string path;                ///< as in /proc/PID/maps
    target_addr load_bias;
    std::vector<target_addr> slots;  ///< the GOT slots pointed at the agent
};

/// What route_to_agent() did.
struct routing_tally {
    std::size_t modules = 0;        ///< modules with at least one slot routed
    std::size_t slots = 0;          ///< slots rewritten (journaled)
    std::size_t already = 0;        ///< slots that held the wrapper already (bound to a preloaded agent)
    std::size_t other_version = 0;  ///< slots bound to other code than the wrapper forwards to (an older symbol version)
    std::vector<std::string> problems;  ///< one line per module or slot that could not be routed
    std::vector<routed_module> routed;  ///< per module with at least one slot routed
};

/// The journal guard for a module's slots (see change_guard), or none.
using routing_guard = std::function<std::optional<change_guard>(const symbols::elf_module&)>;

/// Points every import slot of agent_wrapped_functions() in every module of
/// `modules` except libc, the dynamic loader and the agent itself at the
/// agent's wrapper (its .dynsym address), journaling each write. A slot
/// whose needed version is not libc's default one for that name and is
/// other code (the old pthread_cond_* ABI) is left alone; one whose version
/// is an alias of the default (pthread_create@GLIBC_2.2.5, same address in
/// libc since 2.34) is routed. The target must be held. Never throws:
/// what cannot be done is listed in problems. `guard`, when given, names
/// each module's journal guard (its slots are put back only while it holds).
routing_tally route_to_agent(const symbols::module_set& modules, change_journal& journal, target_memory& memory,
                             const routing_guard& guard = {});

/// The same for one module `m` (a module loaded later), with the agent and
/// libc taken from `modules`; an excluded module (libc, the loader, the
/// agent) routes nothing. Adds to `tally`.
void route_module_to_agent(const symbols::elf_module& m, const symbols::module_set& modules, change_journal& journal,
                           target_memory& memory, std::optional<change_guard> guard, routing_tally& tally);

/// Whether routing passes module `m` by (libc, the dynamic loader, the agent).
bool is_excluded_from_routing(const symbols::elf_module& m);

/// Whether libtdagent.so comes before libc.so.6 in the loader's list of the
/// main namespace (_r_debug.r_map, <link.h>): preloaded or linked, it
/// interposes by itself. std::nullopt when the list cannot be read.
std::optional<bool> agent_precedes_libc(target_access& target);

}  // namespace tdctl::core
