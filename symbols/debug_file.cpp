#include "symbols/debug_file.hpp"

#include <vector>

#include <sys/stat.h>

#include "base/error.hpp"
#include "base/log.hpp"

namespace tdctl::symbols {

namespace {

constexpr const char* debug_root = "/usr/lib/debug";

struct candidate {
    std::string path;
    bool via_debuglink;     // the CRC of the debuglink applies
};

bool same_file(int a, int b)
{
    struct stat sa, sb;
    return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string directory_of(const std::string& path)
{
    std::size_t slash = path.rfind('/');
    if (slash == std::string::npos)
        return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name)
{
    return dir.ends_with('/') ? dir + name : dir + "/" + name;
}

// Why a candidate is not the module's debug file, or "" if it is.
std::string reject_reason(const elf_file& module, const elf_file& cand, const std::string& build_id,
                          const std::optional<debuglink>& link, bool via_debuglink)
{
    if (same_file(module.fd(), cand.fd()))
        return "it is the module itself";
    if (cand.section_by_type(SHT_SYMTAB) == nullptr)
        return "no .symtab";
    std::string cand_id = cand.read_build_id();
    if (!build_id.empty() && !cand_id.empty())
        return cand_id == build_id ? "" : "build-id " + cand_id + " differs";
    if (via_debuglink && link && file_crc32(cand.fd()) != link->crc)
        return "CRC differs from .gnu_debuglink";
    return "";
}

}  // namespace

std::optional<elf_file> find_debug_file(const elf_file& module, const std::string& module_path,
                                        const std::string& build_id, const std::string& root_prefix)
{
    std::vector<candidate> candidates;
    if (build_id.size() > 2)
        candidates.push_back({fmt::format("{}/.build-id/{}/{}.debug", debug_root, build_id.substr(0, 2),
                                          build_id.substr(2)),
                              false});
    std::optional<debuglink> link = module.read_debuglink();
    if (link && !module_path.empty()) {
        std::string dir = directory_of(module_path);
        candidates.push_back({join(dir, link->file_name), true});
        candidates.push_back({join(join(dir, ".debug"), link->file_name), true});
        candidates.push_back({join(std::string(debug_root) + dir, link->file_name), true});
    }

    for (const candidate& c : candidates) {
        std::vector<std::string> paths;
        if (!root_prefix.empty())
            paths.push_back(root_prefix + c.path);
        paths.push_back(c.path);
        for (const std::string& p : paths) {
            try {
                std::optional<elf_file> f = elf_file::try_open(p);
                if (!f)
                    continue;
                std::string why = reject_reason(module, *f, build_id, link, c.via_debuglink);
                if (why.empty()) {
                    log::debug("{}: debug file {}", module_path, p);
                    return f;
                }
                log::debug("{}: not using {} as debug file: {}", module_path, p, why);
            } catch (const error& e) {
                log::debug("{}: not using {} as debug file: {}", module_path, p, e.what());
            }
        }
    }
    return std::nullopt;
}

}  // namespace tdctl::symbols
