#include "symbols/symbol_table.hpp"

#include <optional>
#include <tuple>
#include <utility>

#include <elf.h>
#include <gelf.h>

#include "base/error.hpp"
#include "symbols/symbol_versions.hpp"

namespace tdctl::symbols {

namespace {

int binding_rank(unsigned char binding)
{
    switch (binding) {
    case STB_GLOBAL:
    case STB_GNU_UNIQUE: return 0;
    case STB_WEAK: return 1;
    default: return 2;
    }
}

// The entry of symbol i of a table whose names are in string section
// `strtab`, as read() and find_hashed() take it; std::nullopt for what a
// table leaves out (undefined, section and file symbols, no name).
std::optional<table_entry> entry_of(const elf_file& file, std::size_t strtab, const GElf_Sym& sym, std::size_t i,
                                    const std::optional<version_names>& versions)
{
    const unsigned char type = GELF_ST_TYPE(sym.st_info);
    if (sym.st_shndx == SHN_UNDEF || type == STT_SECTION || type == STT_FILE || sym.st_name == 0)
        return std::nullopt;
    const char* raw = elf_strptr(file.get(), strtab, sym.st_name);
    if (raw == nullptr || *raw == '\0')
        return std::nullopt;

    table_entry e;
    // .symtab spells versions into the name ("memcpy@GLIBC_2.2.5"); split
    // them so both tables answer the same queries.
    symbol_query spelled = symbol_query::parse(raw);
    e.name = spelled.name;
    e.version = spelled.version;
    e.hidden = spelled.match == version_match::exact;
    if (versions && e.version.empty())
        std::tie(e.version, e.hidden) = versions->of(i);
    e.value = sym.st_value;
    e.size = sym.st_size;
    e.type = type;
    e.binding = GELF_ST_BIND(sym.st_info);
    e.absolute = sym.st_shndx == SHN_ABS;
    return e;
}

bool matches(const symbol_query& q, const table_entry& e)
{
    switch (q.match) {
    case version_match::any: return true;
    case version_match::exact: return e.version == q.version;
    case version_match::default_only: return e.version == q.version && !e.hidden;
    }
    return false;
}

// Lower is better: default or unversioned before hidden, then global before
// weak before local.
int rank_of(const table_entry& e)
{
    return (e.hidden ? 4 : 0) + binding_rank(e.binding);
}

// The GNU hash of a symbol name (the dynamic linker's dl_new_hash).
std::uint32_t gnu_hash(std::string_view name)
{
    std::uint32_t h = 5381;
    for (unsigned char c : name)
        h = h * 33 + c;
    return h;
}

// .gnu.hash (ELF64): nbuckets, symoffset, bloom_size, bloom_shift (32 bits
// each), bloom_size 64-bit words, nbuckets bucket words, then one chain
// word per hashed symbol (from symoffset on), its low bit ending a chain.
struct gnu_hash_index {
    std::uint64_t nbuckets = 0;
    std::uint64_t symoffset = 0;          ///< index of the first hashed symbol
    const std::uint32_t* buckets = nullptr;
    const std::uint32_t* chain = nullptr; ///< chain[i - symoffset] for symbol i
    std::size_t chain_words = 0;

    /// The section's index for a table of `count` symbols; std::nullopt when
    /// a size does not add up (the file is the target's: nothing is trusted).
    static std::optional<gnu_hash_index> of(const Elf_Data& hash, std::size_t count)
    {
        const std::size_t words = hash.d_size / sizeof(std::uint32_t);
        const auto* w = static_cast<const std::uint32_t*>(hash.d_buf);
        if (words < 4)
            return std::nullopt;
        const std::uint64_t nbuckets = w[0], symoffset = w[1], bloom_words = w[2];
        const std::uint64_t buckets_at = 4 + bloom_words * 2;
        if (nbuckets == 0 || symoffset == 0 || symoffset > count || buckets_at + nbuckets > words)
            return std::nullopt;
        const std::uint32_t* buckets = w + buckets_at;
        return gnu_hash_index{nbuckets, symoffset, buckets, buckets + nbuckets, words - buckets_at - nbuckets};
    }
};

// The SHT_GNU_HASH section that indexes the symbol table at `dynsym_index`,
// or nullptr.
Elf_Data* gnu_hash_data(const elf_file& file, std::size_t dynsym_index)
{
    for (Elf_Scn* scn = elf_nextscn(file.get(), nullptr); scn != nullptr; scn = elf_nextscn(file.get(), scn)) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) != nullptr && sh.sh_type == SHT_GNU_HASH && sh.sh_link == dynsym_index)
            return elf_getdata(scn, nullptr);
    }
    return nullptr;
}

// One .dynsym read entry by entry, with its version names.
class dynamic_symbols {
public:
    dynamic_symbols(const elf_file& file, Elf_Data* data, std::size_t strtab, std::size_t dynsym_index)
        : file_(file), data_(data), strtab_(strtab)
    {
        versions_.emplace(file, dynsym_index);
    }

    /// Symbol i as entry_of() gives it (std::nullopt for one a table leaves
    /// out); false when the symbol cannot be read.
    bool read(std::size_t i, std::optional<table_entry>& entry) const
    {
        GElf_Sym sym;
        if (gelf_getsym(data_, static_cast<int>(i), &sym) == nullptr)
            return false;
        entry = entry_of(file_, strtab_, sym, i, versions_);
        return true;
    }

    /// True when every symbol before `end` could be read and none is named `name`.
    bool none_named_before(std::size_t end, std::string_view name) const
    {
        for (std::size_t i = 1; i < end; ++i) {
            std::optional<table_entry> e;
            if (!read(i, e) || (e && e->name == name))
                return false;
        }
        return true;
    }

private:
    const elf_file& file_;
    Elf_Data* data_;
    std::size_t strtab_;
    std::optional<version_names> versions_;
};

// The best match for q among the symbols of q's hash chain, as find() would
// rank them; std::nullopt when none matches or the chain does not add up.
std::optional<table_entry> best_in_chain(const dynamic_symbols& dynsym, const gnu_hash_index& index,
                                         std::size_t count, const symbol_query& q)
{
    const std::uint32_t h = gnu_hash(q.name);
    std::optional<table_entry> best;
    int best_rank = 0;
    for (std::uint64_t i = index.buckets[h % index.nbuckets]; i >= index.symoffset && i < count; ++i) {
        const std::uint64_t link = i - index.symoffset;
        if (link >= index.chain_words)
            return std::nullopt;
        const std::uint32_t word = index.chain[link];
        if ((word | 1) == (h | 1)) {
            std::optional<table_entry> e;
            if (!dynsym.read(i, e))
                return std::nullopt;
            // In index order, "<" keeps the earliest among equals, as find() does.
            if (e && e->name == q.name && matches(q, *e) && (!best || rank_of(*e) < best_rank)) {
                best_rank = rank_of(*e);
                best = *e;
            }
        }
        if ((word & 1) != 0)
            break;
    }
    return best;
}

}  // namespace

symbol_query symbol_query::parse(std::string_view text)
{
    symbol_query q;
    std::size_t at = text.find('@');
    if (at == std::string_view::npos || at == 0) {
        q.name = text;
        return q;
    }
    q.name = text.substr(0, at);
    if (text.substr(at).starts_with("@@")) {
        q.version = text.substr(at + 2);
        q.match = version_match::default_only;
    } else {
        q.version = text.substr(at + 1);
        q.match = version_match::exact;
    }
    return q;
}

symbol_table symbol_table::read(const elf_file& file, Elf_Scn* scn)
{
    symbol_table t;
    GElf_Shdr sh;
    if (scn == nullptr || gelf_getshdr(scn, &sh) == nullptr || sh.sh_entsize == 0)
        return t;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr)
        throw error::target(file.path() + ": cannot read symbol table: " + elf_errmsg(-1));

    const bool is_dynsym = sh.sh_type == SHT_DYNSYM;
    std::optional<version_names> versions;
    if (is_dynsym)
        versions.emplace(file, elf_ndxscn(scn));

    const std::size_t count = sh.sh_size / sh.sh_entsize;
    t.entries_.reserve(count);
    t.first_by_name_.reserve(count);
    for (std::size_t i = 1; i < count; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr)
            break;
        auto entry = entry_of(file, sh.sh_link, sym, i, versions);
        if (!entry)
            continue;
        table_entry& e = *entry;
        const auto index = static_cast<std::uint32_t>(t.entries_.size());
        auto [it, inserted] = t.first_by_name_.try_emplace(e.name, index);
        e.next_same_name = inserted ? npos : std::exchange(it->second, index);
        t.entries_.push_back(e);
    }
    return t;
}

const table_entry* symbol_table::find(const symbol_query& q) const
{
    auto it = first_by_name_.find(q.name);
    if (it == first_by_name_.end())
        return nullptr;

    const table_entry* best = nullptr;
    int best_rank = 0;
    // The chain runs from the last entry to the first; "<=" keeps the
    // earliest entry among equals, as the linker would see it.
    for (std::uint32_t i = it->second; i != npos; i = entries_[i].next_same_name) {
        const table_entry& e = entries_[i];
        if (!matches(q, e))
            continue;
        int rank = rank_of(e);
        if (best == nullptr || rank <= best_rank) {
            best = &e;
            best_rank = rank;
        }
    }
    return best;
}

std::optional<table_entry> symbol_table::find_hashed(const elf_file& file, Elf_Scn* dynsym, const symbol_query& q)
{
    GElf_Shdr dyn;
    if (dynsym == nullptr || gelf_getclass(file.get()) != ELFCLASS64 || gelf_getshdr(dynsym, &dyn) == nullptr ||
        dyn.sh_type != SHT_DYNSYM || dyn.sh_entsize == 0)
        return std::nullopt;
    const std::size_t dynsym_index = elf_ndxscn(dynsym);
    Elf_Data* hash = gnu_hash_data(file, dynsym_index);
    Elf_Data* data = elf_getdata(dynsym, nullptr);
    if (hash == nullptr || hash->d_buf == nullptr || data == nullptr)
        return std::nullopt;
    const std::size_t count = dyn.sh_size / dyn.sh_entsize;
    auto index = gnu_hash_index::of(*hash, count);
    if (!index)
        return std::nullopt;

    const dynamic_symbols table(file, data, dyn.sh_link, dynsym_index);
    // An entry the hash does not reach (before symoffset) with this name could
    // outrank the hashed ones: then the whole table decides.
    if (!table.none_named_before(index->symoffset, q.name))
        return std::nullopt;
    return best_in_chain(table, *index, count, q);
}

}  // namespace tdctl::symbols
