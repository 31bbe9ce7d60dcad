// Finding the separate debug file of a stripped module, the way gdb and
// elfutils do: by build-id under /usr/lib/debug/.build-id, then by the
// .gnu_debuglink name. Internal to symbols/.
#pragma once

#include <optional>
#include <string>

#include "symbols/elf_file.hpp"

namespace tdctl::symbols {

/// Looks for the debug file of `module` (mapped in the target as
/// `module_path`, with GNU build-id `build_id`, possibly empty), in order:
///   /usr/lib/debug/.build-id/<first 2 hex>/<rest>.debug
///   <dir of module_path>/<debuglink name>
///   <dir>/.debug/<debuglink name>
///   /usr/lib/debug/<dir>/<debuglink name>
/// Each path is tried first under `root_prefix` (e.g. "/proc/PID/root" for a
/// target in another mount namespace; may be empty) and then as is. A
/// candidate is accepted only if it has a .symtab and its build-id equals the
/// module's (when both have one), else its CRC-32 equals the debuglink's.
/// Returns nullopt when nothing acceptable is found.
std::optional<elf_file> find_debug_file(const elf_file& module, const std::string& module_path,
                                        const std::string& build_id, const std::string& root_prefix);

}  // namespace tdctl::symbols
