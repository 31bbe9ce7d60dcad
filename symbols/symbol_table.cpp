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
        const unsigned char type = GELF_ST_TYPE(sym.st_info);
        if (sym.st_shndx == SHN_UNDEF || type == STT_SECTION || type == STT_FILE || sym.st_name == 0)
            continue;
        const char* raw = elf_strptr(file.get(), sh.sh_link, sym.st_name);
        if (raw == nullptr || *raw == '\0')
            continue;

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
        switch (q.match) {
        case version_match::any: break;
        case version_match::exact:
            if (e.version != q.version)
                continue;
            break;
        case version_match::default_only:
            if (e.version != q.version || e.hidden)
                continue;
            break;
        }
        int rank = (e.hidden ? 4 : 0) + binding_rank(e.binding);
        if (best == nullptr || rank <= best_rank) {
            best = &e;
            best_rank = rank;
        }
    }
    return best;
}

}  // namespace tdctl::symbols
