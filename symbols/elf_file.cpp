#include "symbols/elf_file.hpp"

#include <array>
#include <cerrno>
#include <cstring>

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.hpp"

namespace tdctl::symbols {

namespace {

// libelf refuses every call until the library version has been set once.
void init_libelf()
{
    static const bool ok = elf_version(EV_CURRENT) != EV_NONE;
    if (!ok)
        throw error::target(std::string("libelf initialisation failed: ") + elf_errmsg(-1));
}

error libelf_error(const std::string& path, const char* what)
{
    return error::target(path + ": " + what + ": " + elf_errmsg(-1));
}

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

bool is_gnu_build_id(const GElf_Nhdr& n, const char* name)
{
    return n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 && n.n_descsz > 0;
}

std::string build_id_from_data(Elf_Data* data)
{
    if (data == nullptr || data->d_buf == nullptr)
        return {};
    std::size_t offset = 0;
    GElf_Nhdr nhdr;
    std::size_t name_off = 0, desc_off = 0;
    while (offset < data->d_size) {
        std::size_t next = gelf_getnote(data, offset, &nhdr, &name_off, &desc_off);
        if (next == 0)
            break;
        const auto* base = static_cast<const char*>(data->d_buf);
        if (is_gnu_build_id(nhdr, base + name_off))
            return to_hex(std::as_bytes(std::span(base + desc_off, nhdr.n_descsz)));
        offset = next;
    }
    return {};
}

}  // namespace

elf_file::elf_file(unique_fd fd, elf_ptr elf, std::string path)
    : fd_(std::move(fd)), elf_(std::move(elf)), path_(std::move(path))
{
}

std::optional<elf_file> elf_file::from_fd(unique_fd fd, std::string path)
{
    init_libelf();

    // Cheap magic check first, so non-ELF mappings (fonts, locale archives,
    // jars) never reach libelf.
    unsigned char magic[SELFMAG];
    ssize_t n = ::pread(fd.get(), magic, sizeof magic, 0);
    if (n < 0)
        throw error::from_errno(errno, "reading " + path);
    if (n != static_cast<ssize_t>(sizeof magic) || std::memcmp(magic, ELFMAG, SELFMAG) != 0)
        return std::nullopt;

    // ELF_C_READ reads sections on demand with pread: unlike ELF_C_READ_MMAP,
    // a file truncated underneath us gives an error instead of SIGBUS.
    elf_ptr elf(elf_begin(fd.get(), ELF_C_READ, nullptr));
    if (!elf)
        throw libelf_error(path, "elf_begin");
    if (elf_kind(elf.get()) != ELF_K_ELF)
        return std::nullopt;

    elf_file f(std::move(fd), std::move(elf), std::move(path));
    if (gelf_getehdr(f.elf_.get(), &f.ehdr_) == nullptr)
        throw libelf_error(f.path_, "gelf_getehdr");

    std::size_t phnum = 0;
    if (elf_getphdrnum(f.elf_.get(), &phnum) != 0)
        throw libelf_error(f.path_, "elf_getphdrnum");
    f.phdrs_.reserve(phnum);
    for (std::size_t i = 0; i < phnum; ++i) {
        GElf_Phdr ph;
        if (gelf_getphdr(f.elf_.get(), static_cast<int>(i), &ph) == nullptr)
            throw libelf_error(f.path_, "gelf_getphdr");
        f.phdrs_.push_back(ph);
    }
    return f;
}

std::optional<elf_file> elf_file::try_open(const std::string& path)
{
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    if (!fd.is_open() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        return std::nullopt;
    return from_fd(std::move(fd), path);
}

Elf_Scn* elf_file::section_by_type(std::uint32_t sh_type) const
{
    for (Elf_Scn* scn = elf_nextscn(elf_.get(), nullptr); scn != nullptr; scn = elf_nextscn(elf_.get(), scn)) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) != nullptr && sh.sh_type == sh_type)
            return scn;
    }
    return nullptr;
}

Elf_Scn* elf_file::section_by_name(std::string_view name) const
{
    std::size_t shstrndx = 0;
    if (elf_getshdrstrndx(elf_.get(), &shstrndx) != 0)
        return nullptr;
    for (Elf_Scn* scn = elf_nextscn(elf_.get(), nullptr); scn != nullptr; scn = elf_nextscn(elf_.get(), scn)) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) == nullptr)
            continue;
        const char* n = elf_strptr(elf_.get(), shstrndx, sh.sh_name);
        if (n != nullptr && name == n)
            return scn;
    }
    return nullptr;
}

std::string elf_file::read_build_id() const
{
    bool had_note_segment = false;
    for (const GElf_Phdr& ph : phdrs_) {
        if (ph.p_type != PT_NOTE || ph.p_filesz == 0)
            continue;
        had_note_segment = true;
        Elf_Data* data = elf_getdata_rawchunk(elf_.get(), static_cast<int64_t>(ph.p_offset), ph.p_filesz,
                                              ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
        if (std::string id = build_id_from_data(data); !id.empty())
            return id;
    }
    if (had_note_segment)
        return {};

    // Files without program headers (rare) still have the note section.
    for (Elf_Scn* scn = elf_nextscn(elf_.get(), nullptr); scn != nullptr; scn = elf_nextscn(elf_.get(), scn)) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_NOTE)
            continue;
        if (std::string id = build_id_from_data(elf_getdata(scn, nullptr)); !id.empty())
            return id;
    }
    return {};
}

std::string elf_file::read_soname() const
{
    Elf_Scn* scn = section_by_type(SHT_DYNAMIC);
    GElf_Shdr sh;
    if (scn == nullptr || gelf_getshdr(scn, &sh) == nullptr || sh.sh_entsize == 0)
        return {};
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr)
        return {};
    std::size_t count = sh.sh_size / sh.sh_entsize;
    for (std::size_t i = 0; i < count; ++i) {
        GElf_Dyn dyn;
        if (gelf_getdyn(data, static_cast<int>(i), &dyn) == nullptr || dyn.d_tag == DT_NULL)
            break;
        if (dyn.d_tag == DT_SONAME) {
            const char* s = elf_strptr(elf_.get(), sh.sh_link, dyn.d_un.d_val);
            return s != nullptr ? s : "";
        }
    }
    return {};
}

std::optional<debuglink> elf_file::read_debuglink() const
{
    Elf_Scn* scn = section_by_name(".gnu_debuglink");
    if (scn == nullptr)
        return std::nullopt;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr)
        return std::nullopt;
    const auto* bytes = static_cast<const unsigned char*>(data->d_buf);
    const void* nul = std::memchr(bytes, '\0', data->d_size);
    if (nul == nullptr || nul == bytes)
        return std::nullopt;
    std::size_t name_len = static_cast<std::size_t>(static_cast<const unsigned char*>(nul) - bytes);
    std::size_t crc_off = align_up(name_len + 1, 4);
    if (crc_off + 4 > data->d_size)
        return std::nullopt;

    // The CRC is stored in the file's byte order; the section is untranslated bytes.
    const unsigned char* c = bytes + crc_off;
    std::uint32_t crc = ehdr_.e_ident[EI_DATA] == ELFDATA2MSB
                            ? (std::uint32_t{c[0]} << 24) | (std::uint32_t{c[1]} << 16) | (std::uint32_t{c[2]} << 8) | c[3]
                            : (std::uint32_t{c[3]} << 24) | (std::uint32_t{c[2]} << 16) | (std::uint32_t{c[1]} << 8) | c[0];
    return debuglink{std::string(reinterpret_cast<const char*>(bytes), name_len), crc};
}

std::optional<std::vector<std::byte>> find_build_id_note(std::span<const std::byte> notes, std::uint64_t align)
{
    if (align < 4)
        align = 4;
    std::uint64_t pos = 0;
    while (pos + 12 <= notes.size()) {
        std::uint32_t hdr[3];
        std::memcpy(hdr, notes.data() + pos, sizeof hdr);
        const std::uint32_t namesz = hdr[0], descsz = hdr[1], type = hdr[2];
        std::uint64_t name_pos = pos + 12;
        std::uint64_t desc_pos = align_up(name_pos + namesz, align);
        std::uint64_t next = align_up(desc_pos + descsz, align);
        if (desc_pos + descsz > notes.size())
            return std::nullopt;
        if (type == NT_GNU_BUILD_ID && namesz == 4 && descsz > 0 &&
            std::memcmp(notes.data() + name_pos, "GNU", 4) == 0) {
            auto desc = notes.subspan(desc_pos, descsz);
            return std::vector<std::byte>(desc.begin(), desc.end());
        }
        if (next <= pos)
            return std::nullopt;
        pos = next;
    }
    return std::nullopt;
}

std::string to_hex(std::span<const std::byte> bytes)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    s.reserve(bytes.size() * 2);
    for (std::byte b : bytes) {
        auto v = std::to_integer<unsigned>(b);
        s.push_back(digits[v >> 4]);
        s.push_back(digits[v & 0xf]);
    }
    return s;
}

std::uint32_t file_crc32(int fd)
{
    static const auto table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; ++k)
                c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();

    std::uint32_t crc = 0xffffffffu;
    std::array<unsigned char, 1 << 16> buf;
    off_t offset = 0;
    for (;;) {
        ssize_t n = ::pread(fd, buf.data(), buf.size(), offset);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw error::from_errno(errno, "reading a debug file for its CRC");
        }
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; ++i)
            crc = table[(crc ^ buf[static_cast<std::size_t>(i)]) & 0xff] ^ (crc >> 8);
        offset += n;
    }
    return crc ^ 0xffffffffu;
}

}  // namespace tdctl::symbols
