#include "symbols/elf_module.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <tuple>

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "symbols/debug_file.hpp"
#include "symbols/elf_file.hpp"
#include "symbols/import_slots.hpp"
#include "symbols/symbol_table.hpp"

namespace tdctl::symbols {

namespace {

// PT_NOTE segments larger than this are not notes we care about; the cap keeps
// a corrupt header from making us read megabytes of target memory.
constexpr std::uint64_t max_note_segment = 64 * 1024;

std::uint64_t page_size()
{
    static const auto size = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    return size;
}
std::uint64_t page_down(std::uint64_t v) { return v & ~(page_size() - 1); }
std::uint64_t page_up(std::uint64_t v) { return page_down(v + page_size() - 1); }

struct address_range {
    std::uint64_t start = 0, end = 0;
    bool contains(std::uint64_t a) const { return a >= start && a < end; }
};

struct note_segment {
    std::uint64_t vaddr = 0;    // p_vaddr, file address
    std::uint64_t size = 0;     // p_filesz, bytes
    std::uint64_t align = 4;
};

// True when every code segment of f is mapped executable where `bias` puts it,
// from the right file offset. Tells a loaded image from the same file mmapped
// as data (read-only, no code) by some other part of the target.
bool looks_loaded(const elf_file& f, std::uint64_t bias, const std::vector<map_entry>& mappings)
{
    for (const GElf_Phdr& ph : f.program_headers()) {
        if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0 || ph.p_filesz == 0)
            continue;
        const std::uint64_t at = bias + page_down(ph.p_vaddr);
        const bool mapped = std::ranges::any_of(mappings, [&](const map_entry& m) {
            return m.executable && at >= m.start && at < m.end && m.offset + (at - m.start) == page_down(ph.p_offset);
        });
        if (!mapped)
            return false;
    }
    return true;
}

// [lowest, highest) file address covered by the PT_LOAD segments, page-rounded.
std::optional<address_range> load_extent(const elf_file& f)
{
    std::optional<address_range> r;
    for (const GElf_Phdr& ph : f.program_headers()) {
        if (ph.p_type != PT_LOAD || ph.p_memsz == 0)
            continue;
        std::uint64_t lo = page_down(ph.p_vaddr), hi = page_up(ph.p_vaddr + ph.p_memsz);
        if (!r)
            r = address_range{lo, hi};
        r->start = std::min(r->start, lo);
        r->end = std::max(r->end, hi);
    }
    return r;
}

// The load bias if `base` is where the kernel or ld.so mapped the PT_LOAD
// whose page-aligned file offset is base.offset.
std::optional<std::uint64_t> bias_for(const elf_file& f, const map_entry& base)
{
    for (const GElf_Phdr& ph : f.program_headers()) {
        if (ph.p_type == PT_LOAD && page_down(ph.p_offset) == base.offset)
            return base.start - page_down(ph.p_vaddr);
    }
    return std::nullopt;
}

int leading_underscores(std::string_view s)
{
    return static_cast<int>(std::min(s.find_first_not_of('_'), s.size()));
}

// Among aliases at one address, the name a person would expect: global over
// weak over local, default versions over hidden ones, "malloc" over "__libc_malloc".
bool better_name(const table_entry& a, const table_entry& b)
{
    auto key = [](const table_entry& e) {
        int bind = e.binding == STB_GLOBAL || e.binding == STB_GNU_UNIQUE ? 0 : e.binding == STB_WEAK ? 1 : 2;
        return std::tuple(e.hidden, bind, leading_underscores(e.name), e.name.size());
    };
    return key(a) < key(b);
}

enum class open_outcome { opened, failed, not_regular, other_file };

struct open_result {
    open_outcome outcome = open_outcome::failed;
    unique_fd fd;
    int err = 0;
};

// Opens path for reading only if it is a regular file with the mapped inode.
// O_PATH first, so a mapped device node (GPU drivers map /dev files) is never
// really opened: opening some devices has side effects.
open_result open_mapped_file(const std::string& path, std::uint64_t inode)
{
    open_result r;
    unique_fd probe(::open(path.c_str(), O_PATH | O_CLOEXEC));
    struct stat st;
    if (!probe.is_open() || ::fstat(probe.get(), &st) != 0) {
        r.err = errno;
        return r;
    }
    if (!S_ISREG(st.st_mode)) {
        r.outcome = open_outcome::not_regular;
        return r;
    }
    if (st.st_ino != inode) {
        r.outcome = open_outcome::other_file;
        return r;
    }
    // Reopening our own O_PATH descriptor needs no further permission on map_files.
    std::string self = fmt::format("/proc/self/fd/{}", probe.get());
    r.fd.reset(::open(self.c_str(), O_RDONLY | O_CLOEXEC));
    if (!r.fd.is_open()) {
        r.err = errno;
        return r;
    }
    r.outcome = open_outcome::opened;
    return r;
}

// True when the target sees another root directory than we do (a
// container): its debug files may then live under /proc/PID/root.
bool in_other_root(const std::string& target_root)
{
    struct stat ours, theirs;
    if (::stat("/", &ours) != 0 || ::stat(target_root.c_str(), &theirs) != 0)
        return false;
    return ours.st_dev != theirs.st_dev || ours.st_ino != theirs.st_ino;
}

}  // namespace

struct elf_module::impl {
    explicit impl(elf_file f) : file(std::move(f)) {}

    std::string path;           // as in /proc/PID/maps, or as given to open_file
    std::string root_prefix;    // "/proc/PID/root" when the target has another root (container), else empty
    elf_file file;
    target_addr load_bias;
    target_addr start, end;
    std::vector<address_range> executable_ranges;   // target addresses
    std::vector<note_segment> notes;
    std::string build_id;
    std::string soname;

    // Everything below is read lazily under `mutex`: most modules of a big
    // target are never asked for a symbol.
    mutable std::mutex mutex;
    mutable bool own_tables_read = false;
    mutable bool debug_searched = false;
    mutable bool address_index_built = false;
    mutable std::optional<elf_file> debug;
    mutable std::string debug_path;
    mutable symbol_table dynsym, symtab, debug_symtab;
    mutable std::vector<const table_entry*> functions;   // by value
    mutable std::vector<const table_entry*> objects;     // by value

    // Sets where the image lies: the load bias, its extent (file addresses)
    // widened to the mappings inside it, its executable ranges from maps.
    void place(std::uint64_t bias, address_range extent, const std::vector<map_entry>& mappings)
    {
        load_bias = target_addr{bias};
        start = target_addr{bias + extent.start};
        end = target_addr{bias + extent.end};
        const address_range image{start.value, end.value};
        for (const map_entry& m : mappings) {
            if (m.start < image.start || m.end > image.end)
                continue;
            start = std::min(start, target_addr{m.start});
            end = std::max(end, target_addr{m.end});
            if (m.executable)
                executable_ranges.push_back({m.start, m.end});
        }
    }

    // The PT_NOTE segments, build-id and soname, from the file.
    void read_identity()
    {
        for (const GElf_Phdr& ph : file.program_headers()) {
            if (ph.p_type == PT_NOTE && ph.p_filesz > 0)
                notes.push_back({ph.p_vaddr, ph.p_filesz, ph.p_align});
        }
        build_id = file.read_build_id();
        soname = file.read_soname();
    }

    void read_own_tables() const
    {
        if (own_tables_read)
            return;
        dynsym = symbol_table::read(file, file.section_by_type(SHT_DYNSYM));
        symtab = symbol_table::read(file, file.section_by_type(SHT_SYMTAB));
        own_tables_read = true;
    }

    void find_debug() const
    {
        if (debug_searched)
            return;
        debug_searched = true;
        debug = find_debug_file(file, path, build_id, root_prefix);
        if (debug) {
            debug_path = debug->path();
            debug_symtab = symbol_table::read(*debug, debug->section_by_type(SHT_SYMTAB));
        }
    }

    void build_address_index() const
    {
        if (address_index_built)
            return;
        read_own_tables();
        find_debug();
        for (const symbol_table* t : {&dynsym, &symtab, &debug_symtab}) {
            for (const table_entry& e : t->entries()) {
                if (e.absolute)
                    continue;
                if (e.type == STT_FUNC || e.type == STT_GNU_IFUNC)
                    functions.push_back(&e);
                else if (e.type == STT_OBJECT)
                    objects.push_back(&e);
            }
        }
        auto by_value = [](const table_entry* a, const table_entry* b) { return a->value < b->value; };
        std::ranges::stable_sort(functions, by_value);
        std::ranges::stable_sort(objects, by_value);
        address_index_built = true;
    }

    symbol to_symbol(const table_entry& e) const
    {
        symbol s;
        s.name = std::string(e.name);
        s.version = std::string(e.version);
        // Absolute symbols are not relocated; TLS values are block offsets.
        s.address = target_addr{e.absolute || e.type == STT_TLS ? e.value : e.value + load_bias.value};
        s.size = e.size;
        s.type = e.type;
        s.binding = e.binding;
        return s;
    }

    // The entry of a sorted index containing file address fa. With
    // allow_unsized, falls back to the nearest preceding size-0 entry.
    static const table_entry* nearest(const std::vector<const table_entry*>& index, std::uint64_t fa,
                                      bool allow_unsized)
    {
        auto it = std::ranges::upper_bound(index, fa, {}, [](const table_entry* e) { return e->value; });
        if (it == index.begin())
            return nullptr;

        // Walk back a bounded distance: aliases and labels sit between a
        // function's start and fa, but functions do not nest deeply.
        constexpr int max_walk = 64;
        const table_entry* best = nullptr;
        int walked = 0;
        for (auto i = it; i != index.begin() && walked < max_walk; ++walked) {
            const table_entry* e = *--i;
            if (best != nullptr && e->value < best->value)
                break;
            if (e->size > 0 && fa < e->value + e->size && (best == nullptr || better_name(*e, *best)))
                best = e;
        }
        if (best != nullptr || !allow_unsized)
            return best;

        // Only when every symbol at the nearest address is unsized (hand-written
        // assembly); a sized one that missed fa means fa lies in a gap.
        const std::uint64_t nearest_value = (*(it - 1))->value;
        for (auto i = it; i != index.begin();) {
            const table_entry* e = *--i;
            if (e->value != nearest_value)
                break;
            if (e->size > 0)
                return nullptr;
            if (best == nullptr || better_name(*e, *best))
                best = e;
        }
        return best;
    }
};

elf_module::elf_module(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
elf_module::~elf_module() = default;

namespace {

// The mapped file, opened; std::nullopt when it is no regular file (a device).
struct mapped_object {
    unique_fd fd;
    std::string opened_path;   // the name it was opened under
};

// Opens the file `first` maps: through /proc/PID/map_files, which names the
// very object that is mapped (deleted, replaced or in another mount
// namespace) but needs CAP_SYS_ADMIN/CAP_CHECKPOINT_RESTORE; then through
// /proc/PID/root and the path itself, as long as the inode is the mapped one.
// Throws tdctl::error saying why none could be opened.
std::optional<mapped_object> open_mapped_object(pid_t pid, const map_entry& first)
{
    const std::string& path = first.path;
    std::string map_files = fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, first.start, first.end);
    std::vector<std::string> tries{map_files};
    if (!first.deleted) {
        tries.push_back(fmt::format("/proc/{}/root", pid) + path);
        tries.push_back(path);
    }
    int last_err = ENOENT;
    bool saw_other_file = false;
    for (const std::string& p : tries) {
        open_result r = open_mapped_file(p, first.inode);
        if (r.outcome == open_outcome::not_regular)
            return std::nullopt;
        if (r.outcome == open_outcome::opened)
            return mapped_object{std::move(r.fd), p};
        if (r.outcome == open_outcome::other_file) {
            saw_other_file = true;
            log::debug("{}: {} is another file than the mapped one (inode differs)", path, p);
        } else {
            last_err = r.err;
            log::debug("{}: cannot open {}: {}", path, p, std::strerror(r.err));
        }
    }
    const std::string need = "opening it through " + map_files + " needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE";
    if (first.deleted)
        throw error::from_errno(last_err, "opening the mapped file " + path + " (deleted or replaced on disk; " +
                                              need + ")");
    if (saw_other_file)
        throw error::target(path + ": the file on disk is not the one mapped in process " + std::to_string(pid) +
                            " (replaced since it was loaded?); " + need);
    throw error::from_errno(last_err, "opening the mapped file " + path);
}

// The mappings, lowest file offset (then address) first: normally the
// offset-0 mapping of the headers comes first.
std::vector<const map_entry*> by_file_offset(const std::vector<map_entry>& mappings)
{
    std::vector<const map_entry*> sorted;
    for (const map_entry& m : mappings)
        sorted.push_back(&m);
    std::ranges::stable_sort(sorted, {}, [](const map_entry* m) { return std::pair(m->offset, m->start); });
    return sorted;
}

}  // namespace

std::unique_ptr<elf_module> elf_module::open_mapped(pid_t pid, const std::vector<map_entry>& mappings)
{
    if (mappings.empty())
        throw error::usage("open_mapped: no mappings given");
    std::vector<const map_entry*> sorted = by_file_offset(mappings);
    const std::string& path = sorted.front()->path;
    std::optional<mapped_object> object = open_mapped_object(pid, *sorted.front());
    if (!object)
        return nullptr;
    std::optional<elf_file> file = elf_file::from_fd(std::move(object->fd), object->opened_path);
    if (!file)
        return nullptr;
    const auto type = file->header().e_type;
    if (type != ET_EXEC && type != ET_DYN)
        return nullptr;
    std::optional<address_range> extent = load_extent(*file);
    if (!extent)
        return nullptr;

    // Several images of one file can be in `mappings` (dlmopen namespaces, or
    // the file mmapped as data); take the first that looks loaded.
    for (const map_entry* base : sorted) {
        std::optional<std::uint64_t> bias = bias_for(*file, *base);
        if (!bias || !looks_loaded(*file, *bias, mappings))
            continue;
        auto p = std::make_unique<impl>(std::move(*file));
        p->path = path;
        std::string root = fmt::format("/proc/{}/root", pid);
        p->root_prefix = in_other_root(root) ? root : "";
        p->place(*bias, *extent, mappings);
        p->read_identity();
        log::debug("{}: load bias {:#x} (opened {})", path, *bias, object->opened_path);
        return std::unique_ptr<elf_module>(new elf_module(std::move(p)));
    }
    log::debug("{}: no mapping looks like a loaded image", path);
    return nullptr;
}

std::unique_ptr<elf_module> elf_module::open_file(const std::string& path, target_addr load_bias)
{
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.is_open())
        throw error::from_errno(errno, "opening " + path);
    std::optional<elf_file> file = elf_file::from_fd(std::move(fd), path);
    if (!file)
        return nullptr;

    auto p = std::make_unique<impl>(std::move(*file));
    p->path = path;
    p->load_bias = load_bias;
    std::optional<address_range> extent = load_extent(p->file);
    if (extent) {
        p->start = load_bias + static_cast<std::int64_t>(extent->start);
        p->end = load_bias + static_cast<std::int64_t>(extent->end);
    }
    for (const GElf_Phdr& ph : p->file.program_headers()) {
        if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) != 0 && ph.p_memsz > 0)
            p->executable_ranges.push_back({load_bias.value + ph.p_vaddr, load_bias.value + ph.p_vaddr + ph.p_memsz});
    }
    p->read_identity();
    return std::unique_ptr<elf_module>(new elf_module(std::move(p)));
}

const std::string& elf_module::path() const { return impl_->path; }

std::string elf_module::soname() const
{
    if (!impl_->soname.empty())
        return impl_->soname;
    std::size_t slash = impl_->path.rfind('/');
    return slash == std::string::npos ? impl_->path : impl_->path.substr(slash + 1);
}

target_addr elf_module::load_bias() const { return impl_->load_bias; }
target_addr elf_module::start() const { return impl_->start; }
target_addr elf_module::end() const { return impl_->end; }

bool elf_module::is_executable_mapping(target_addr a) const
{
    return std::ranges::any_of(impl_->executable_ranges, [&](const address_range& r) { return r.contains(a.value); });
}

const std::string& elf_module::build_id() const { return impl_->build_id; }

std::optional<bool> elf_module::build_id_matches(target_memory& mem) const
{
    if (impl_->build_id.empty())
        return std::nullopt;
    for (const note_segment& n : impl_->notes) {
        std::vector<std::byte> buf(std::min(n.size, max_note_segment));
        std::size_t got = mem.read(impl_->load_bias + static_cast<std::int64_t>(n.vaddr), buf);
        buf.resize(got);
        if (auto id = find_build_id_note(buf, n.align))
            return to_hex(*id) == impl_->build_id;
    }
    return std::nullopt;
}

std::optional<symbol> elf_module::lookup(std::string_view name) const
{
    if (auto r = lookup_with_source(name))
        return std::move(r->first);
    return std::nullopt;
}

std::optional<std::pair<symbol, symbol_source>> elf_module::lookup_with_source(std::string_view name) const
{
    const symbol_query q = symbol_query::parse(name);
    std::lock_guard lock(impl_->mutex);
    // Until something needs the whole tables (an address to name, a name
    // .dynsym does not have), a name .dynsym has is found through .gnu.hash:
    // an attach looks up a few names in libc's 3,000 symbols.
    if (!impl_->own_tables_read)
        if (auto e = symbol_table::find_hashed(impl_->file, impl_->file.section_by_type(SHT_DYNSYM), q))
            return std::pair(impl_->to_symbol(*e), symbol_source::dynsym);
    impl_->read_own_tables();
    if (const table_entry* e = impl_->dynsym.find(q))
        return std::pair(impl_->to_symbol(*e), symbol_source::dynsym);
    if (const table_entry* e = impl_->symtab.find(q))
        return std::pair(impl_->to_symbol(*e), symbol_source::symtab);
    impl_->find_debug();
    if (const table_entry* e = impl_->debug_symtab.find(q))
        return std::pair(impl_->to_symbol(*e), symbol_source::debug_file);
    return std::nullopt;
}

std::optional<symbol> elf_module::nearest_symbol(target_addr a) const
{
    if (a < impl_->start || a >= impl_->end)
        return std::nullopt;
    std::lock_guard lock(impl_->mutex);
    impl_->build_address_index();
    const std::uint64_t fa = a.value - impl_->load_bias.value;
    const table_entry* e = impl::nearest(impl_->functions, fa, is_executable_mapping(a));
    if (e == nullptr)
        e = impl::nearest(impl_->objects, fa, false);
    if (e == nullptr)
        return std::nullopt;
    return impl_->to_symbol(*e);
}

std::vector<import_slot> elf_module::import_slots() const
{
    return read_import_slots(impl_->file, impl_->load_bias.value);
}

bool elf_module::has_debug_file() const
{
    std::lock_guard lock(impl_->mutex);
    impl_->find_debug();
    return impl_->debug.has_value();
}

const std::string& elf_module::debug_file_path() const
{
    std::lock_guard lock(impl_->mutex);
    impl_->find_debug();
    return impl_->debug_path;
}

bool elf_module::has_symtab() const
{
    std::lock_guard lock(impl_->mutex);
    if (impl_->file.section_by_type(SHT_SYMTAB) != nullptr)
        return true;
    impl_->find_debug();
    return impl_->debug && impl_->debug->section_by_type(SHT_SYMTAB) != nullptr;
}

}  // namespace tdctl::symbols
