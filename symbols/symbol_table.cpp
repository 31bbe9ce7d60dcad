#include "symbols/symbol_table.hpp"

#include <optional>
#include <tuple>
#include <utility>

#include <elf.h>
#include <gelf.h>

#include "base/error.hpp"

namespace tdctl::symbols {

namespace {

// GNU versym: low 15 bits index the version, the top bit marks a hidden
// (non-default) definition. Indexes 0 and 1 mean local / unversioned global.
constexpr std::uint16_t versym_hidden = 0x8000;
constexpr std::uint16_t versym_index_mask = 0x7fff;

// Version index -> version name for one .dynsym, from .gnu.version_d
// (definitions) and .gnu.version_r (needs: copy-relocated data in executables
// is defined in .dynsym with a needed version).
class version_names {
public:
    version_names(const elf_file& file, std::size_t dynsym_index)
    {
        for (Elf_Scn* scn = elf_nextscn(file.get(), nullptr); scn != nullptr; scn = elf_nextscn(file.get(), scn)) {
            GElf_Shdr sh;
            if (gelf_getshdr(scn, &sh) == nullptr)
                continue;
            if (sh.sh_type == SHT_GNU_versym && sh.sh_link == dynsym_index)
                versym_ = elf_getdata(scn, nullptr);
            else if (sh.sh_type == SHT_GNU_verdef)
                read_verdef(file.get(), elf_getdata(scn, nullptr), sh);
            else if (sh.sh_type == SHT_GNU_verneed)
                read_verneed(file.get(), elf_getdata(scn, nullptr), sh);
        }
    }

    // Version of dynamic symbol i: (name, hidden).
    std::pair<std::string_view, bool> of(std::size_t i) const
    {
        GElf_Versym vs;
        if (versym_ == nullptr || gelf_getversym(versym_, static_cast<int>(i), &vs) == nullptr)
            return {{}, false};
        std::uint16_t index = vs & versym_index_mask;
        if (index <= 1 || index >= names_.size())
            return {{}, false};
        return {names_[index], (vs & versym_hidden) != 0};
    }

private:
    void set(std::size_t index, const char* name)
    {
        if (name == nullptr || index <= 1)
            return;
        if (index >= names_.size())
            names_.resize(index + 1);
        names_[index] = name;
    }

    // Visits the `count` records of a version section chained from byte
    // `offset` of data (none when data is null): each is read by `get`
    // (gelf_getverdef & co.) and gives the distance to the next in its `next`
    // field (0: the last).
    template <typename Record, typename Get, typename Next, typename Visit>
    static void walk_chain(Elf_Data* data, std::size_t count, std::size_t offset, Get get, Next Record::*next,
                           Visit visit)
    {
        for (std::size_t n = 0; data != nullptr && n < count; ++n) {
            Record r;
            if (get(data, static_cast<int>(offset), &r) == nullptr)
                break;
            visit(r, offset);
            if (r.*next == 0)
                break;
            offset += r.*next;
        }
    }

    void read_verdef(Elf* elf, Elf_Data* data, const GElf_Shdr& sh)
    {
        walk_chain(data, sh.sh_info, 0, gelf_getverdef, &GElf_Verdef::vd_next,
                   [&](const GElf_Verdef& vd, std::size_t offset) {
                       GElf_Verdaux aux;
                       if (vd.vd_cnt > 0 &&
                           gelf_getverdaux(data, static_cast<int>(offset + vd.vd_aux), &aux) != nullptr)
                           set(vd.vd_ndx, elf_strptr(elf, sh.sh_link, aux.vda_name));
                   });
    }

    void read_verneed(Elf* elf, Elf_Data* data, const GElf_Shdr& sh)
    {
        walk_chain(data, sh.sh_info, 0, gelf_getverneed, &GElf_Verneed::vn_next,
                   [&](const GElf_Verneed& vn, std::size_t offset) {
                       walk_chain(data, vn.vn_cnt, offset + vn.vn_aux, gelf_getvernaux, &GElf_Vernaux::vna_next,
                                  [&](const GElf_Vernaux& aux, std::size_t) {
                                      set(aux.vna_other & versym_index_mask,
                                          elf_strptr(elf, sh.sh_link, aux.vna_name));
                                  });
                   });
    }

    Elf_Data* versym_ = nullptr;
    std::vector<std::string_view> names_;
};

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
