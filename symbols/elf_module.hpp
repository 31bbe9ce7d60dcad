// One ELF object mapped into the target: its load bias, build-id and symbols
// (.dynsym with version names, .symtab, and the separate debug file's .symtab).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "symbols/proc_maps.hpp"

namespace tdctl::symbols {

/// A symbol resolved to a target address.
struct symbol {
    std::string name;           ///< without version
    std::string version;        ///< e.g. "GLIBC_PRIVATE"; empty when unversioned
    target_addr address;        ///< st_value + load bias
    std::uint64_t size = 0;     ///< st_size, bytes
    unsigned char type = 0;     ///< STT_* of st_info
    unsigned char binding = 0;  ///< STB_* of st_info
};

/// A GOT slot through which a module calls, or takes the address of, a
/// function another module defines: an R_X86_64_JUMP_SLOT (PLT) or
/// R_X86_64_GLOB_DAT (-fno-plt, BIND_NOW, address taken) relocation against
/// an undefined .dynsym symbol.
struct import_slot {
    std::string name;         ///< the imported symbol, without version
    std::string version;      ///< the version it needs ("GLIBC_2.3.2"); empty when unversioned
    target_addr address;      ///< the slot: load bias + r_offset
    bool is_plt = false;      ///< JUMP_SLOT rather than GLOB_DAT
};

/// Where a module's symbols came from, for messages and `threads` output.
enum class symbol_source { dynsym, symtab, debug_file };

class elf_module {
public:
    ~elf_module();
    elf_module(const elf_module&) = delete;
    elf_module& operator=(const elf_module&) = delete;

    /// Opens the module of the target whose mappings are `mappings` (every
    /// maps entry with the same path/inode; one of them has offset 0). The
    /// file is opened through /proc/PID/map_files/START-END so a deleted or
    /// replaced file, or one inside a container, resolves to what is really
    /// mapped; /proc/PID/root/PATH is the fallback. Returns nullptr when the
    /// mapping is not an ELF file (or a device, or an ELF file only mmapped as
    /// data: no executable mapping although it has code). When `mappings`
    /// holds several images of one file (dlmopen), the one with the lowest
    /// file offset / address wins; module_set::load passes the rest again.
    /// Throws tdctl::error when it cannot be opened (e.g. a deleted file and
    /// map_files not readable without CAP_SYS_ADMIN/CAP_CHECKPOINT_RESTORE).
    static std::unique_ptr<elf_module> open_mapped(pid_t pid, const std::vector<map_entry>& mappings);

    /// Opens an ELF file on disk with a given load bias (tests, static use).
    static std::unique_ptr<elf_module> open_file(const std::string& path, target_addr load_bias);

    const std::string& path() const;        ///< path as in /proc/PID/maps
    std::string soname() const;             ///< DT_SONAME, or the file name
    target_addr load_bias() const;          ///< mapping start − page-aligned p_vaddr of the PT_LOAD at offset 0
    /// Lowest target address of the module: its PT_LOAD segments (page-rounded,
    /// .bss included) and its file mappings.
    target_addr start() const;
    target_addr end() const;                ///< one past the highest, as start()
    /// True if a lies in one of the module's executable mappings (from maps;
    /// for open_file, its PF_X segments).
    bool is_executable_mapping(target_addr a) const;

    /// GNU build-id from the file's NT_GNU_BUILD_ID note, lowercase hex; empty if none.
    const std::string& build_id() const;

    /// Reads the NT_GNU_BUILD_ID note from target memory (PT_NOTE at load bias)
    /// and compares with the file's. std::nullopt when either has no build-id
    /// (or the note cannot be read from the target).
    std::optional<bool> build_id_matches(target_memory& mem) const;

    /// Looks up a symbol by name in .dynsym, then .symtab, then the separate
    /// debug file (found via /usr/lib/debug/.build-id/xx/rest.debug, then
    /// .gnu_debuglink in the file's directory, its .debug/ and
    /// /usr/lib/debug/DIR). `name` may carry a version: "sym@VER" or
    /// "sym@@VER" match only that version; plain "sym" matches any version,
    /// preferring the default (@@) one. "sym@VER" also matches VER when it is
    /// the default, as dlvsym does; "sym@@VER" does not match a hidden VER.
    /// Undefined symbols (SHN_UNDEF) never match. Each table is read and hashed
    /// on first use, so later lookups are O(1). Addresses are st_value + load
    /// bias, except SHN_ABS symbols (not relocated) and STT_TLS (offset in the
    /// module's TLS block). For STT_GNU_IFUNC it is the resolver's address.
    std::optional<symbol> lookup(std::string_view name) const;

    /// Like lookup(), but also says which table answered.
    std::optional<std::pair<symbol, symbol_source>> lookup_with_source(std::string_view name) const;

    /// The symbol describe() names for target address a: the function whose
    /// [address, address+size) contains a; in code, the nearest preceding
    /// unsized function (assembly); else a data object containing a.
    /// std::nullopt outside the module or when no symbol fits. Reads all
    /// tables (and looks for the debug file) on first use.
    std::optional<symbol> nearest_symbol(target_addr a) const;

    /// Every import slot of the module, from the file's relocation sections
    /// (read on each call). Throws tdctl::error (target) when they cannot be read.
    std::vector<import_slot> import_slots() const;
    /// True when a separate debug file was found and opened.
    bool has_debug_file() const;
    const std::string& debug_file_path() const;

    /// True if .symtab (own or debug file) exists, i.e. the module is not stripped.
    bool has_symtab() const;

    struct impl;

private:
    explicit elf_module(std::unique_ptr<impl> p);
    std::unique_ptr<impl> impl_;
};

/// Every ELF module mapped in the target, from /proc/PID/maps.
class module_set {
public:
    /// Reads /proc/PID/maps and opens every file-backed ELF module. Modules
    /// that fail to open are skipped (and listed in skipped()).
    static module_set load(pid_t pid);

    const std::vector<std::unique_ptr<elf_module>>& modules() const { return modules_; }
    const std::vector<std::string>& skipped() const { return skipped_; }

    /// The main executable (the module mapped from /proc/PID/exe), or nullptr.
    const elf_module* main_executable() const;

    /// The first module whose soname or file name starts with `prefix`
    /// (e.g. "libc.so.6", "ld-linux", "libtdagent.so"), or nullptr.
    const elf_module* find(std::string_view prefix) const;

    /// The module containing target address a, or nullptr.
    const elf_module* containing(target_addr a) const;

    /// Looks the name up in every module in maps order; the first hit wins.
    std::optional<symbol> lookup(std::string_view name) const;

    /// The symbol whose [address, address+size) contains a (nearest preceding
    /// function when sizes are 0), for printing start routines. "" if none.
    std::string describe(target_addr a) const;

    /// True when /proc/PID/maps still shows exactly the file mappings this
    /// set was loaded from (addresses, offsets, device, inode, path,
    /// protection): a set loaded before an attach can then serve the
    /// attached session. False when they differ or cannot be read.
    bool maps_unchanged(pid_t pid) const;

private:
    /// The file-backed entries of the maps this set was loaded from.
    static std::vector<map_entry> file_mappings(std::vector<map_entry> all);

    std::vector<std::unique_ptr<elf_module>> modules_;
    std::vector<map_entry> mappings_;
    std::vector<std::string> skipped_;
    std::string exe_path_;
};

}  // namespace tdctl::symbols
