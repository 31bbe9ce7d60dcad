// ELF modules of fixture children: a non-PIE executable (load bias 0), and
// libraries deleted or replaced on disk after they were loaded.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include "base/error.hpp"
#include "symbols/elf_module.hpp"
#include "symbols/proc_maps.hpp"
#include "symbols_test_helpers.hpp"

using namespace tdctl;
using namespace tdctl::symbols;
using namespace tdctl::symbols::test;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the temp dir, removed with its contents at scope exit.
class temp_dir {
public:
    temp_dir()
    {
        std::string pattern = (fs::temp_directory_path() / "tdctl-symbols-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr)
            throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
    }
    ~temp_dir()
    {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

std::uint16_t elf_type_of(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    Elf64_Ehdr h{};
    in.read(reinterpret_cast<char*>(&h), sizeof h);
    return h.e_type;
}

// Whether this process may open /proc/PID/map_files entries (root, or
// CAP_SYS_ADMIN / CAP_CHECKPOINT_RESTORE); deleted files need it.
bool can_open_map_files()
{
    for (const map_entry& e : read_maps(::getpid())) {
        if (!e.is_file_backed())
            continue;
        std::string p = fmt::format("/proc/self/map_files/{:x}-{:x}", e.start, e.end);
        int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return false;
        ::close(fd);
        return true;
    }
    return false;
}

const elf_module* module_at_path(const module_set& set, const fs::path& path)
{
    for (const auto& m : set.modules()) {
        if (m->path() == path.string())
            return m.get();
    }
    return nullptr;
}

}  // namespace

TEST_CASE("a non-PIE executable has load bias 0 and its symbols at their link addresses")
{
    REQUIRE(elf_type_of(SYMBOLS_FIXTURE_NOPIE) == ET_EXEC);
    fixture_process child(SYMBOLS_FIXTURE_NOPIE, {});
    auto lines = child.read_until_ready();
    auto function = printed_address(lines, "function");
    auto global = printed_address(lines, "global");
    REQUIRE(function.has_value());
    REQUIRE(global.has_value());

    module_set set = module_set::load(child.pid());
    const elf_module* exe = set.main_executable();
    REQUIRE(exe != nullptr);
    CHECK(fs::equivalent(exe->path(), SYMBOLS_FIXTURE_NOPIE));
    CHECK(exe->load_bias().value == 0);

    auto f = exe->lookup("symbols_target_function");
    REQUIRE(f.has_value());
    CHECK(f->address.value == *function);
    CHECK(f->type == STT_FUNC);
    auto g = exe->lookup("symbols_target_global");
    REQUIRE(g.has_value());
    CHECK(g->address.value == *global);
    CHECK(g->type == STT_OBJECT);

    CHECK(set.containing(target_addr{*function}) == exe);
    CHECK(set.describe(target_addr{*function}) == "symbols_target_function");
    CHECK(set.describe(target_addr{*function + 4}) == "symbols_target_function+0x4");
    CHECK(set.describe(target_addr{*global}) == "symbols_target_global");

    // The child's libc is found too, at a bias that puts its symbols in its maps.
    const elf_module* libc = set.find("libc.so.6");
    REQUIRE(libc != nullptr);
    auto create = libc->lookup("__nptl_create_event");
    REQUIRE(create.has_value());
    CHECK(libc->is_executable_mapping(create->address));
}

TEST_CASE("libraries deleted or replaced on disk still resolve through map_files")
{
    if (!can_open_map_files()) {
        MESSAGE("/proc/PID/map_files cannot be opened here (needs root, CAP_SYS_ADMIN or "
                "CAP_CHECKPOINT_RESTORE); skipped");
        return;
    }
    // Precondition for the test to mean anything: the replacement puts the
    // function elsewhere, so reading the file on disk would give a wrong address.
    auto in_a = elf_module::open_file(SYMBOLS_FIXTURE_LIB_A, target_addr{0});
    auto in_b = elf_module::open_file(SYMBOLS_FIXTURE_LIB_B, target_addr{0});
    REQUIRE(in_a != nullptr);
    REQUIRE(in_b != nullptr);
    auto a_fn = in_a->lookup("symbols_tiny_function");
    auto b_fn = in_b->lookup("symbols_tiny_function");
    REQUIRE(a_fn.has_value());
    REQUIRE(b_fn.has_value());
    REQUIRE(a_fn->address != b_fn->address);

    temp_dir dir;
    const fs::path deleted = dir.path() / "lib deleted.so";   // a space, as maps allows
    const fs::path replaced = dir.path() / "libreplaced.so";
    fs::copy_file(SYMBOLS_FIXTURE_LIB_A, deleted);
    fs::copy_file(SYMBOLS_FIXTURE_LIB_A, replaced);

    fixture_process child(SYMBOLS_FIXTURE_NOPIE, {"dlopen", deleted.string(), "symbols_tiny_function", "dlopen",
                                                  replaced.string(), "symbols_tiny_function"});
    auto lines = child.read_until_ready();
    REQUIRE(lines.size() == 4);
    REQUIRE(lines[2].starts_with("symbol symbols_tiny_function "));
    REQUIRE(lines[3].starts_with("symbol symbols_tiny_function "));
    const std::uint64_t deleted_fn = std::strtoull(lines[2].c_str() + 29, nullptr, 16);
    const std::uint64_t replaced_fn = std::strtoull(lines[3].c_str() + 29, nullptr, 16);
    REQUIRE(deleted_fn != 0);
    REQUIRE(replaced_fn != 0);

    fs::remove(deleted);
    const fs::path incoming = dir.path() / "incoming.so";
    fs::copy_file(SYMBOLS_FIXTURE_LIB_B, incoming);
    fs::rename(incoming, replaced);

    // The kernel now reports both as deleted: the mapped inodes have no name.
    auto maps = read_maps(child.pid());
    auto is_deleted = [&](const fs::path& p) {
        return std::ranges::any_of(maps, [&](const map_entry& e) { return e.path == p.string() && e.deleted; });
    };
    CHECK(is_deleted(deleted));
    CHECK(is_deleted(replaced));

    module_set set = module_set::load(child.pid());
    for (const std::string& s : set.skipped())
        MESSAGE("skipped module: " << s);

    const elf_module* d = module_at_path(set, deleted);
    REQUIRE(d != nullptr);
    auto d_fn = d->lookup("symbols_tiny_function");
    REQUIRE(d_fn.has_value());
    CHECK(d_fn->address.value == deleted_fn);
    // __symbols_tiny_function_impl is an alias at the same address.
    auto alias = d->lookup("__symbols_tiny_function_impl");
    REQUIRE(alias.has_value());
    CHECK(alias->address.value == deleted_fn);
    CHECK(set.describe(target_addr{deleted_fn}) == "symbols_tiny_function");
    CHECK(set.describe(target_addr{deleted_fn + 2}) == "symbols_tiny_function+0x2");

    const elf_module* r = module_at_path(set, replaced);
    REQUIRE(r != nullptr);
    auto r_fn = r->lookup("symbols_tiny_function");
    REQUIRE(r_fn.has_value());
    CHECK(r_fn->address.value == replaced_fn);
    // The mapped copy is lib A: it has no padding function, which B has.
    CHECK_FALSE(r->lookup("symbols_tiny_padding").has_value());
    CHECK(r->soname() == d->soname());
}

// Files whose names end in " (deleted)" lost that part of their name (and
// passed for deleted, so only map_files could open them).
TEST_CASE("an executable and a library named \"... (deleted)\" keep their whole names")
{
    temp_dir dir;
    const fs::path exe = dir.path() / "nopie (deleted)";
    const fs::path lib = dir.path() / "lib a (deleted)";
    fs::copy_file(SYMBOLS_FIXTURE_NOPIE, exe);
    fs::copy_file(SYMBOLS_FIXTURE_LIB_A, lib);
    fixture_process child(exe.string(), {"dlopen", lib.string(), "symbols_tiny_function"});
    auto lines = child.read_until_ready();
    REQUIRE(lines.size() == 3);
    REQUIRE(lines[2].starts_with("symbol symbols_tiny_function "));
    const std::uint64_t lib_fn = std::strtoull(lines[2].c_str() + 29, nullptr, 16);

    auto maps = read_maps(child.pid());
    for (const fs::path& p : {exe, lib}) {
        CAPTURE(p);
        CHECK(std::ranges::any_of(maps, [&](const map_entry& e) { return e.path == p.string() && !e.deleted; }));
    }
    module_set set = module_set::load(child.pid());
    const elf_module* main = set.main_executable();
    REQUIRE(main != nullptr);
    CHECK(main->path() == exe.string());
    const elf_module* l = module_at_path(set, lib);
    REQUIRE(l != nullptr);
    CHECK(set.containing(target_addr{lib_fn}) == l);
    CHECK(set.describe(target_addr{lib_fn}) == "symbols_tiny_function");
}

TEST_CASE("a deleted executable is still the main executable, under its name without the kernel's suffix")
{
    if (!can_open_map_files()) {
        MESSAGE("/proc/PID/map_files cannot be opened here (needs root, CAP_SYS_ADMIN or "
                "CAP_CHECKPOINT_RESTORE); skipped");
        return;
    }
    temp_dir dir;
    const fs::path exe = dir.path() / "gone";
    fs::copy_file(SYMBOLS_FIXTURE_NOPIE, exe);
    fixture_process child(exe.string(), {});
    child.read_until_ready();
    fs::remove(exe);
    module_set set = module_set::load(child.pid());
    const elf_module* main = set.main_executable();
    REQUIRE(main != nullptr);
    CHECK(main->path() == exe.string());
}

TEST_CASE("opening a deleted module without map_files fails with an actionable message")
{
    // open_mapped with a maps entry that names a deleted file and a pid whose
    // map_files has no such entry: nothing else may be opened in its place.
    map_entry fake;
    fake.start = 0x1000;
    fake.end = 0x2000;
    fake.readable = true;
    fake.offset = 0;
    fake.inode = 12345;
    fake.path = SYMBOLS_FIXTURE_LIB_A;    // exists on disk, but is not what is "mapped"
    fake.deleted = true;
    try {
        elf_module::open_mapped(::getpid(), {fake});
        FAIL("open_mapped did not throw");
    } catch (const tdctl::error& e) {
        CHECK(std::string(e.what()).find("deleted") != std::string::npos);
    }

    // Not deleted, but the inode on disk differs: the file was replaced in a
    // way maps cannot show (another mount namespace); refuse it as well.
    fake.deleted = false;
    CHECK_THROWS_AS(elf_module::open_mapped(::getpid(), {fake}), tdctl::error);
}

TEST_CASE("a library loaded twice is two modules; the same file mmapped as data is none")
{
    fixture_process child(SYMBOLS_FIXTURE_NOPIE, {"mmap", SYMBOLS_FIXTURE_LIB_A, "dlopen", SYMBOLS_FIXTURE_LIB_A,
                                                  "symbols_tiny_function", "dlmopen", SYMBOLS_FIXTURE_LIB_A,
                                                  "symbols_tiny_function"});
    auto lines = child.read_until_ready();
    REQUIRE(lines.size() == 5);
    auto data = printed_address(lines, "mmap");
    REQUIRE(data.has_value());
    std::vector<std::uint64_t> printed;
    for (const std::string& l : lines) {
        if (l.starts_with("symbol symbols_tiny_function "))
            printed.push_back(std::strtoull(l.c_str() + 29, nullptr, 16));
    }
    REQUIRE(printed.size() == 2);
    REQUIRE(printed[0] != printed[1]);

    module_set set = module_set::load(child.pid());
    std::vector<std::uint64_t> found;
    for (const auto& m : set.modules()) {
        if (!fs::equivalent(m->path(), SYMBOLS_FIXTURE_LIB_A))
            continue;
        auto fn = m->lookup("symbols_tiny_function");
        REQUIRE(fn.has_value());
        CHECK(m->is_executable_mapping(fn->address));
        found.push_back(fn->address.value);
    }
    std::ranges::sort(printed);
    std::ranges::sort(found);
    CHECK(found == printed);
    CHECK(set.containing(target_addr{*data}) == nullptr);
    CHECK(set.describe(target_addr{*data}) == "");
}
