// Import slots on x86_64: a PLT call goes through an R_X86_64_JUMP_SLOT entry
// (.rela.plt), a -fno-plt call or a function's address taken in PIC code
// through an R_X86_64_GLOB_DAT entry (.rela.dyn). The dynamic loader writes
// the definition's address into either; a slot of a BIND_NOW object lies in
// the RELRO pages, read-only once loading is over.
#include "symbols/import_slots.hpp"

#include <string>

#include <elf.h>
#include <gelf.h>

#include "base/error.hpp"
#include "symbols/symbol_versions.hpp"

namespace tdctl::symbols {

namespace {

bool is_import_relocation(std::uint64_t type)
{
    return type == R_X86_64_JUMP_SLOT || type == R_X86_64_GLOB_DAT;
}

// The relocations of one SHT_RELA section whose symbols are in `dynsym`.
void read_section(const elf_file& file, Elf_Scn* rela, const GElf_Shdr& rela_header, Elf_Scn* dynsym,
                  const version_names& versions, std::uint64_t load_bias, std::vector<import_slot>& out)
{
    Elf_Data* data = elf_getdata(rela, nullptr);
    GElf_Shdr sym_header;
    Elf_Data* symbols = elf_getdata(dynsym, nullptr);
    if (data == nullptr || symbols == nullptr || gelf_getshdr(dynsym, &sym_header) == nullptr)
        throw error::target(file.path() + ": cannot read relocations: " + elf_errmsg(-1));
    const std::size_t count = rela_header.sh_entsize ? rela_header.sh_size / rela_header.sh_entsize : 0;
    for (std::size_t i = 0; i < count; ++i) {
        GElf_Rela r;
        if (gelf_getrela(data, static_cast<int>(i), &r) == nullptr)
            break;
        const std::size_t index = GELF_R_SYM(r.r_info);
        GElf_Sym sym;
        if (!is_import_relocation(GELF_R_TYPE(r.r_info)) || index == 0 ||
            gelf_getsym(symbols, static_cast<int>(index), &sym) == nullptr || sym.st_shndx != SHN_UNDEF)
            continue;  // a slot the module fills with its own definition is not an import
        const char* name = elf_strptr(file.get(), sym_header.sh_link, sym.st_name);
        if (name == nullptr || *name == '\0')
            continue;
        import_slot slot;
        slot.name = name;
        slot.version = std::string(versions.of(index).first);
        slot.address = target_addr{load_bias + r.r_offset};
        slot.is_plt = GELF_R_TYPE(r.r_info) == R_X86_64_JUMP_SLOT;
        out.push_back(std::move(slot));
    }
}

}  // namespace

std::vector<import_slot> read_import_slots(const elf_file& file, std::uint64_t load_bias)
{
    std::vector<import_slot> out;
    Elf_Scn* dynsym = file.section_by_type(SHT_DYNSYM);
    if (dynsym == nullptr)
        return out;
    const version_names versions(file, elf_ndxscn(dynsym));
    for (Elf_Scn* scn = elf_nextscn(file.get(), nullptr); scn != nullptr; scn = elf_nextscn(file.get(), scn)) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) != nullptr && sh.sh_type == SHT_RELA && sh.sh_link == elf_ndxscn(dynsym))
            read_section(file, scn, sh, dynsym, versions, load_bias, out);
    }
    return out;
}

}  // namespace tdctl::symbols
