// GNU symbol versions of one .dynsym: version index -> name, from
// .gnu.version with .gnu.version_d (definitions) and .gnu.version_r (needs).
// Internal to symbols/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include <elf.h>
#include <gelf.h>

#include "symbols/elf_file.hpp"

namespace tdctl::symbols {

// GNU versym: low 15 bits index the version, the top bit marks a hidden
// (non-default) definition. Indexes 0 and 1 mean local / unversioned global.
inline constexpr std::uint16_t versym_hidden = 0x8000;
inline constexpr std::uint16_t versym_index_mask = 0x7fff;

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

}  // namespace tdctl::symbols
