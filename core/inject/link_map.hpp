// What the dynamic loader publishes for debuggers (<link.h>): the rendezvous
// structure `_r_debug` of the main namespace, with the address the loader
// calls at each change to its list of modules (r_brk, glibc's
// _dl_debug_state) and the state of that list (r_state), and the list itself
// (struct link_map: l_addr, l_name, l_ld, l_next). Read through the target's
// memory only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "core/target_access.hpp"

namespace tdctl::core {

/// The loader's rendezvous structure and the function it calls at each change.
struct loader_rendezvous {
    target_addr r_debug;          ///< `_r_debug` in ld-linux (its .dynsym)
    target_addr r_brk;            ///< r_debug.r_brk, read from the target
    std::uint64_t r_brk_size = 0; ///< st_size of `_dl_debug_state` when r_brk is that function, else 0
};

/// The state r_debug.r_state says the list is in (RT_CONSISTENT, RT_ADD, RT_DELETE).
enum class link_map_state { consistent, adding, deleting };

/// One module of the loader's list.
struct link_map_entry {
    target_addr entry;       ///< the struct link_map itself
    target_addr l_addr;      ///< load bias (0 for a non-PIE executable)
    target_addr l_ld;        ///< its dynamic section, in the target
    std::string name;        ///< l_name: the path as the loader opened it ("" for the executable)
};

/// `_r_debug` and r_brk of the target's dynamic loader; std::nullopt for a
/// static program, a loader without the symbol, or an unreadable r_brk.
std::optional<loader_rendezvous> find_loader_rendezvous(target_access& target);

/// r_debug.r_state now; std::nullopt when unreadable or not a known state.
std::optional<link_map_state> read_link_map_state(target_memory& memory, const loader_rendezvous& rv);

/// The main namespace's list, from r_debug.r_map, in list order (at most
/// 65536 entries: a corrupted list must not hang us). std::nullopt when an
/// entry cannot be read. Meaningful only while the state is consistent.
std::optional<std::vector<link_map_entry>> read_link_map(target_memory& memory, const loader_rendezvous& rv);

/// The address of a module's DT_INIT function (load bias + d_ptr), read from
/// its dynamic section in the target (glibc does not relocate DT_INIT there);
/// std::nullopt when it has none or the section cannot be read. The first of
/// its code the loader runs after relocating it.
std::optional<target_addr> read_init_function(target_memory& memory, const link_map_entry& module);

/// Where a module's load bias is kept in its link_map entry (for a journal
/// guard: glibc frees the entry when it unloads the module, and free()
/// overwrites its first bytes).
inline target_addr l_addr_field(const link_map_entry& module) { return module.entry; }

}  // namespace tdctl::core
