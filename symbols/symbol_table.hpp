// One ELF symbol table (.dynsym or .symtab), indexed by name, with GNU symbol
// versions attached. Internal to symbols/.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <libelf.h>

#include "symbols/elf_file.hpp"

namespace tdctl::symbols {

enum class version_match {
    any,            ///< "sym": any version, the default (or unversioned) one preferred
    exact,          ///< "sym@VER": version VER, default or hidden (like dlvsym)
    default_only,   ///< "sym@@VER": version VER, only as the default version
};

/// A lookup name split into symbol and version.
struct symbol_query {
    std::string_view name;
    std::string_view version;
    version_match match = version_match::any;

    /// Splits "sym", "sym@VER" or "sym@@VER" at the first '@'.
    static symbol_query parse(std::string_view text);
};

/// One defined symbol. Names point into libelf's string data, so the
/// elf_file the table was read from must outlive it.
struct table_entry {
    std::string_view name;      ///< without version
    std::string_view version;   ///< empty when unversioned
    std::uint64_t value = 0;    ///< st_value: file address, or offset in the TLS block for STT_TLS
    std::uint64_t size = 0;     ///< st_size, bytes
    unsigned char type = 0;     ///< STT_*
    unsigned char binding = 0;  ///< STB_*
    bool hidden = false;        ///< a non-default version ("sym@VER")
    bool absolute = false;      ///< SHN_ABS: the value is not relocated by the load bias
    std::uint32_t next_same_name = 0;  ///< index of the next entry with this name, or npos
};

class symbol_table {
public:
    static constexpr std::uint32_t npos = 0xffffffffu;

    /// Reads every defined symbol (st_shndx != SHN_UNDEF) of the SHT_SYMTAB or
    /// SHT_DYNSYM section scn, skipping section and file symbols. Version names
    /// come from .gnu.version with .gnu.version_d / .gnu.version_r, or from a
    /// literal "sym@VER" / "sym@@VER" name as .symtab spells them.
    static symbol_table read(const elf_file& file, Elf_Scn* scn);

    /// The best entry matching q: global before weak before local, default or
    /// unversioned before hidden versions; nullptr when nothing matches.
    const table_entry* find(const symbol_query& q) const;

    /// What read(file, dynsym).find(q) returns, found through the file's
    /// .gnu.hash without reading the table: only the symbols whose hash
    /// matches are looked at. std::nullopt when nothing is found that way,
    /// or when the hash cannot answer alone (no .gnu.hash for this .dynsym,
    /// not ELF64, an unhashed entry of that name, a table that does not add
    /// up): the caller then reads the table. Dynamic symbol names spelled
    /// with a version ("sym@VER") are not reached through the hash.
    static std::optional<table_entry> find_hashed(const elf_file& file, Elf_Scn* dynsym, const symbol_query& q);

    const std::vector<table_entry>& entries() const { return entries_; }

private:
    std::vector<table_entry> entries_;
    std::unordered_map<std::string_view, std::uint32_t> first_by_name_;
};

}  // namespace tdctl::symbols
