// An ELF file opened read-only through libelf: the descriptor and the Elf*
// handle live and die together. Internal to symbols/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gelf.h>
#include <libelf.h>

#include "base/unique_fd.hpp"

namespace tdctl::symbols {

struct elf_end_deleter {
    void operator()(Elf* e) const { elf_end(e); }
};
using elf_ptr = std::unique_ptr<Elf, elf_end_deleter>;

/// The contents of a .gnu_debuglink section.
struct debuglink {
    std::string file_name;      ///< name of the separate debug file, no directory
    std::uint32_t crc = 0;      ///< CRC-32 of the whole debug file
};

class elf_file {
public:
    /// Takes ownership of fd. Returns nullopt when the file is not an ELF
    /// object (wrong magic, too short); throws tdctl::error when libelf fails
    /// on something that claims to be ELF. `path` is only for messages.
    static std::optional<elf_file> from_fd(unique_fd fd, std::string path);

    /// Opens path read-only. nullopt when it does not exist, cannot be opened
    /// or is not ELF (callers probe candidate paths with this).
    static std::optional<elf_file> try_open(const std::string& path);

    Elf* get() const { return elf_.get(); }
    int fd() const { return fd_.get(); }
    const std::string& path() const { return path_; }

    const GElf_Ehdr& header() const { return ehdr_; }
    const std::vector<GElf_Phdr>& program_headers() const { return phdrs_; }

    /// The first section of this type that has contents in the file
    /// (SHT_NOBITS copies, as in debug files, do not count), or nullptr.
    Elf_Scn* section_by_type(std::uint32_t sh_type) const;
    Elf_Scn* section_by_name(std::string_view name) const;

    /// NT_GNU_BUILD_ID from the PT_NOTE segments (or SHT_NOTE sections when
    /// there are no program headers), lowercase hex; empty if none.
    std::string read_build_id() const;

    /// DT_SONAME from the dynamic section; empty if none.
    std::string read_soname() const;

    /// .gnu_debuglink, if the file has one.
    std::optional<debuglink> read_debuglink() const;

private:
    elf_file(unique_fd fd, elf_ptr elf, std::string path);

    unique_fd fd_;
    elf_ptr elf_;
    std::string path_;
    GElf_Ehdr ehdr_{};
    std::vector<GElf_Phdr> phdrs_;
};

/// Scans a block of ELF notes as laid out in memory or in a file (native byte
/// order) for NT_GNU_BUILD_ID with owner "GNU". `align` is the segment's
/// p_align (4 or 8). Returns the descriptor bytes, or nullopt.
std::optional<std::vector<std::byte>> find_build_id_note(std::span<const std::byte> notes, std::uint64_t align);

/// Lowercase hex of bytes.
std::string to_hex(std::span<const std::byte> bytes);

/// CRC-32 (IEEE 802.3, as zlib and .gnu_debuglink use) of a whole file.
/// Throws tdctl::error when it cannot be read.
std::uint32_t file_crc32(int fd);

}  // namespace tdctl::symbols
