#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <tuple>

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::symbols {

namespace {

// readlink(/proc/PID/exe) without the " (deleted)" the kernel appends to a
// deleted file's name (unmark_deleted: as read_maps() decides it, so that
// the executable's mappings carry the same path); empty when not permitted
// (then there is no main executable to report).
std::string exe_path_of(pid_t pid)
{
    std::string link = fmt::format("/proc/{}/exe", pid);
    char buf[PATH_MAX];
    ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
    if (n < 0) {
        log::debug("readlink {}: {}", link, std::strerror(errno));
        return {};
    }
    struct stat st{};
    const std::uint64_t inode = ::stat(link.c_str(), &st) == 0 ? st.st_ino : 0;
    return unmark_deleted(pid, std::string_view(buf, static_cast<std::size_t>(n)), inode).path;
}

std::string_view base_name(std::string_view path)
{
    std::size_t slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

module_set module_set::load(pid_t pid)
{
    module_set set;
    set.exe_path_ = exe_path_of(pid);

    // One group per mapped file, in order of first appearance.
    using file_key = std::tuple<unsigned, unsigned, std::uint64_t, std::string>;
    std::map<file_key, std::size_t> group_of;
    std::vector<std::vector<map_entry>> groups;
    set.mappings_ = file_mappings(read_maps(pid, maps_lines::file_backed));
    for (map_entry e : set.mappings_) {
        auto [it, inserted] = group_of.try_emplace(file_key{e.dev_major, e.dev_minor, e.inode, e.path}, groups.size());
        if (inserted)
            groups.emplace_back();
        groups[it->second].push_back(std::move(e));
    }

    for (std::vector<map_entry>& rest : groups) {
        // A file can be loaded more than once (dlmopen): each open_mapped call
        // takes one image; pass what it did not cover again.
        while (!rest.empty()) {
            std::unique_ptr<elf_module> m;
            try {
                m = elf_module::open_mapped(pid, rest);
            } catch (const error& e) {
                set.skipped_.push_back(e.what());
                log::debug("skipping {}: {}", rest.front().path, e.what());
                break;
            }
            if (!m)
                break;
            std::erase_if(rest, [&](const map_entry& e) {
                return target_addr{e.start} >= m->start() && target_addr{e.end} <= m->end();
            });
            set.modules_.push_back(std::move(m));
        }
    }
    std::ranges::sort(set.modules_, {}, [](const std::unique_ptr<elf_module>& m) { return m->start(); });
    return set;
}

std::vector<map_entry> module_set::file_mappings(std::vector<map_entry> all)
{
    std::erase_if(all, [](const map_entry& e) { return !e.is_file_backed(); });
    return all;
}

bool module_set::maps_unchanged(pid_t pid) const
{
    std::vector<map_entry> now;
    try {
        now = file_mappings(read_maps(pid, maps_lines::file_backed));
    } catch (const error&) {
        return false;
    }
    auto key = [](const map_entry& e) {
        return std::tie(e.start, e.end, e.offset, e.dev_major, e.dev_minor, e.inode, e.path, e.deleted, e.readable,
                        e.writable, e.executable, e.shared);
    };
    return std::ranges::equal(now, mappings_, [&](const map_entry& a, const map_entry& b) { return key(a) == key(b); });
}

const elf_module* module_set::main_executable() const
{
    if (exe_path_.empty())
        return nullptr;
    for (const auto& m : modules_) {
        if (m->path() == exe_path_)
            return m.get();
    }
    return nullptr;
}

const elf_module* module_set::find(std::string_view prefix) const
{
    for (const auto& m : modules_) {
        if (m->soname().starts_with(prefix) || base_name(m->path()).starts_with(prefix))
            return m.get();
    }
    return nullptr;
}

const elf_module* module_set::containing(target_addr a) const
{
    for (const auto& m : modules_) {
        if (a >= m->start() && a < m->end())
            return m.get();
    }
    return nullptr;
}

std::optional<symbol> module_set::lookup(std::string_view name) const
{
    for (const auto& m : modules_) {
        if (auto s = m->lookup(name))
            return s;
    }
    return std::nullopt;
}

std::string module_set::describe(target_addr a) const
{
    const elf_module* m = containing(a);
    if (m == nullptr)
        return {};
    std::optional<symbol> s = m->nearest_symbol(a);
    if (!s)
        return {};
    std::int64_t offset = a - s->address;
    return offset == 0 ? s->name : fmt::format("{}+{:#x}", s->name, offset);
}

}  // namespace tdctl::symbols
