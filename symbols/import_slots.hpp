// The GOT slots of one ELF file through which it reaches functions other
// modules define. Internal to symbols/ (elf_module::import_slots is the way in).
#pragma once

#include <cstdint>
#include <vector>

#include "symbols/elf_file.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::symbols {

/// Every R_X86_64_JUMP_SLOT and R_X86_64_GLOB_DAT relocation of the file's
/// SHT_RELA sections against its .dynsym, with the symbol's needed version,
/// at load bias + r_offset. Throws tdctl::error (target) when a relocation
/// section cannot be read.
std::vector<import_slot> read_import_slots(const elf_file& file, std::uint64_t load_bias);

}  // namespace tdctl::symbols
