// parse_maps / read_maps on canned text and on the test process itself.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.hpp"
#include "symbols/elf_module.hpp"
#include "symbols/proc_maps.hpp"
#include "tests/support/temp_file.hpp"

using tdctl::symbols::map_entry;
using tdctl::symbols::parse_maps;
using tdctl::symbols::read_maps;

TEST_CASE("parse_maps reads a normal file-backed line")
{
    auto maps = parse_maps(
        "7f8940fda000-7f8941130000 r-xp 00026000 fe:00 332835                     "
        "/usr/lib/x86_64-linux-gnu/libc.so.6\n");
    REQUIRE(maps.size() == 1);
    const map_entry& e = maps[0];
    CHECK(e.start == 0x7f8940fda000);
    CHECK(e.end == 0x7f8941130000);
    CHECK(e.readable);
    CHECK_FALSE(e.writable);
    CHECK(e.executable);
    CHECK_FALSE(e.shared);
    CHECK(e.offset == 0x26000);
    CHECK(e.dev_major == 0xfe);
    CHECK(e.dev_minor == 0);
    CHECK(e.inode == 332835);
    CHECK(e.path == "/usr/lib/x86_64-linux-gnu/libc.so.6");
    CHECK_FALSE(e.deleted);
    CHECK(e.is_file_backed());
}

TEST_CASE("parse_maps keeps spaces inside paths and strips (deleted)")
{
    auto maps = parse_maps(
        "00400000-00401000 r--p 00000000 08:01 42 /tmp/my dir/a b.so\n"
        "7f0000000000-7f0000001000 rw-s 00001000 103:05 77   /tmp/gone lib.so (deleted)\n"
        "7f0000002000-7f0000003000 r--p 00000000 08:01 78 /tmp/trailing space \n");
    REQUIRE(maps.size() == 3);
    CHECK(maps[0].path == "/tmp/my dir/a b.so");
    CHECK_FALSE(maps[0].deleted);

    CHECK(maps[1].path == "/tmp/gone lib.so");
    CHECK(maps[1].deleted);
    CHECK(maps[1].shared);
    CHECK(maps[1].writable);
    CHECK(maps[1].offset == 0x1000);
    CHECK(maps[1].dev_major == 0x103);
    CHECK(maps[1].dev_minor == 5);
    CHECK(maps[1].is_file_backed());

    // Only the kernel's suffix is removed, not other trailing characters.
    CHECK(maps[2].path == "/tmp/trailing space ");
}

TEST_CASE("parse_maps handles anonymous and special mappings")
{
    auto maps = parse_maps(
        "55a3d49ce000-55a3d49ef000 rw-p 00000000 00:00 0                          [heap]\n"
        "7f8940f31000-7f8940f53000 rw-p 00000000 00:00 0 \n"
        "7f8940f60000-7f8940f61000 ---p 00000000 00:00 0\n"
        "7f89411a9000-7f89411ab000 r-xp 00000000 00:00 0                          [vdso]\n"
        "7fffdb66f000-7fffdb690000 rw-p 00000000 00:00 0                          [stack]\n"
        "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n");
    REQUIRE(maps.size() == 6);
    CHECK(maps[0].path == "[heap]");
    CHECK(maps[1].path.empty());
    CHECK(maps[2].path.empty());
    CHECK_FALSE(maps[2].readable);
    CHECK(maps[3].path == "[vdso]");
    CHECK(maps[3].executable);
    CHECK(maps[4].path == "[stack]");
    CHECK(maps[5].start == 0xffffffffff600000);
    CHECK(maps[5].end == 0xffffffffff601000);
    for (const map_entry& e : maps) {
        CHECK_FALSE(e.is_file_backed());
        CHECK_FALSE(e.deleted);
    }
}

TEST_CASE("parse_maps with maps_lines::file_backed keeps exactly the file-backed lines")
{
    const char* text =
        "55a3d49ce000-55a3d49ef000 rw-p 00000000 00:00 0                          [heap]\n"
        "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 123                        /usr/bin/a b\n"
        "7f8940f31000-7f8940f53000 rw-p 00000000 00:00 0 \n"
        "7f8940f60000-7f8940f61000 ---p 00000000 00:00 0\n"
        "7f8940f70000-7f8940f71000 rw-p 00000000 00:00 0                          [anon:a/b]\n"
        "7f8941000000-7f8941001000 r-xp 00001000 fd:01 456                        /lib/libc.so.6 (deleted)\n"
        "7fffdb66f000-7fffdb690000 rw-p 00000000 00:00 0                          [stack]\n";
    auto files = parse_maps(text, tdctl::symbols::maps_lines::file_backed);
    REQUIRE(files.size() == 2);
    CHECK(files[0].path == "/usr/bin/a b");
    CHECK(files[1].path == "/lib/libc.so.6");
    CHECK(files[1].deleted);
    std::vector<map_entry> filtered;
    for (auto& e : parse_maps(text))
        if (e.is_file_backed())
            filtered.push_back(e);
    REQUIRE(filtered.size() == files.size());

    // And on this process: the same entries as reading all and filtering.
    auto mine = read_maps(::getpid(), tdctl::symbols::maps_lines::file_backed);
    std::vector<map_entry> all_files;
    for (auto& e : read_maps(::getpid()))
        if (e.is_file_backed())
            all_files.push_back(e);
    REQUIRE(mine.size() == all_files.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
        CHECK(mine[i].start == all_files[i].start);
        CHECK(mine[i].path == all_files[i].path);
    }
}

TEST_CASE("parse_maps skips malformed lines and keeps the good ones")
{
    auto maps = parse_maps(
        "garbage\n"
        "\n"
        "00400000 r--p 00000000 08:01 42 /no/end/address\n"
        "00400000-00401000 r--p 00000000 08:01\n"
        "00400000-00401000 r-p 00000000 08:01 42 /short/perms\n"
        "00401000-00400000 r--p 00000000 08:01 42 /end/before/start\n"
        "00400000-00401000 r--p zz 08:01 42 /bad/offset\n"
        "00400000-00401000 r--p 00000000 08:01 42x /bad/inode\n"
        "00600000-00601000 rw-p 00002000 08:01 42 /good\n"
        "00700000-00701000 r--p 00000000 08:01 43 /no/newline/at/end");
    REQUIRE(maps.size() == 2);
    CHECK(maps[0].path == "/good");
    CHECK(maps[0].start == 0x600000);
    CHECK(maps[0].offset == 0x2000);
    CHECK(maps[1].path == "/no/newline/at/end");
}

TEST_CASE("read_maps of the test process contains this executable and the stack")
{
    auto maps = read_maps(::getpid());
    REQUIRE_FALSE(maps.empty());
    char exe[4096];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE(n > 0);
    exe[n] = '\0';
    CHECK(std::ranges::any_of(maps, [&](const map_entry& e) { return e.path == exe && e.executable; }));
    CHECK(std::ranges::any_of(maps, [](const map_entry& e) { return e.path == "[stack]"; }));
    // The address of a local variable lies in some mapping.
    int local = 0;
    auto here = reinterpret_cast<std::uint64_t>(&local);
    CHECK(std::ranges::any_of(maps, [&](const map_entry& e) { return here >= e.start && here < e.end; }));
}

TEST_CASE("read_maps of a process that does not exist throws an OS error")
{
    // PID 0 never has a /proc entry.
    try {
        read_maps(0);
        FAIL("read_maps(0) did not throw");
    } catch (const tdctl::error& e) {
        CHECK(e.domain() == tdctl::error_domain::os);
        CHECK(e.code() == ENOENT);
    }
}

TEST_CASE("module_set::maps_unchanged: true while the file mappings are those it was loaded from")
{
    const pid_t self = ::getpid();
    auto set = tdctl::symbols::module_set::load(self);
    CHECK(set.maps_unchanged(self));
    // Anonymous memory is no module: it changes nothing.
    void* anon = ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(anon != MAP_FAILED);
    CHECK(set.maps_unchanged(self));
    // A file mapped since, then gone again.
    int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    void* file = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    REQUIRE(file != MAP_FAILED);
    CHECK_FALSE(set.maps_unchanged(self));
    ::munmap(file, 4096);
    ::close(fd);
    CHECK(set.maps_unchanged(self));
    ::munmap(anon, 1 << 16);
    // No such process: not the same.
    CHECK_FALSE(set.maps_unchanged(0));
}

namespace {

// A page of a new file `name` in `dir`, mapped read-only into this process
// (unmapped, file closed, at the end).
class mapped_page {
public:
    mapped_page(const std::string& dir, const std::string& name) : path_(dir + "/" + name)
    {
        int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        REQUIRE(fd >= 0);
        REQUIRE(::ftruncate(fd, 4096) == 0);
        addr_ = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
        ::close(fd);
        REQUIRE(addr_ != MAP_FAILED);
    }
    ~mapped_page() { ::munmap(addr_, 4096); }
    mapped_page(const mapped_page&) = delete;
    mapped_page& operator=(const mapped_page&) = delete;

    const std::string& path() const { return path_; }
    std::uint64_t start() const { return reinterpret_cast<std::uint64_t>(addr_); }

private:
    std::string path_;
    void* addr_ = nullptr;
};

const map_entry& entry_at(const std::vector<map_entry>& maps, std::uint64_t start)
{
    auto it = std::ranges::find_if(maps, [&](const map_entry& e) { return e.start == start; });
    REQUIRE(it != maps.end());
    return *it;
}

}  // namespace

// A library whose file was really named `evil (deleted)` was shown as `evil`
// (and, taken for deleted, opened only through /proc/PID/map_files).
TEST_CASE("read_maps tells a file named \"... (deleted)\" from a deleted file")
{
    tdctl::test::temp_directory dir("tdctl-maps-deleted");
    mapped_page named(dir.path(), "evil (deleted)");          // kept: its name ends so
    mapped_page gone(dir.path(), "gone");                     // deleted below
    mapped_page both(dir.path(), "both (deleted)");           // named so, and deleted below
    mapped_page twin(dir.path(), "twin");                     // deleted, another file takes "twin (deleted)"
    REQUIRE(::unlink(gone.path().c_str()) == 0);
    REQUIRE(::unlink(both.path().c_str()) == 0);
    REQUIRE(::unlink(twin.path().c_str()) == 0);
    mapped_page other(dir.path(), "twin (deleted)");

    for (auto which : {tdctl::symbols::maps_lines::all, tdctl::symbols::maps_lines::file_backed}) {
        auto maps = read_maps(::getpid(), which);
        const map_entry& n = entry_at(maps, named.start());
        CHECK(n.path == named.path());
        CHECK_FALSE(n.deleted);
        const map_entry& g = entry_at(maps, gone.start());
        CHECK(g.path == gone.path());
        CHECK(g.deleted);
        const map_entry& b = entry_at(maps, both.start());
        CHECK(b.path == both.path());
        CHECK(b.deleted);
        const map_entry& t = entry_at(maps, twin.start());
        CHECK(t.path == twin.path());
        CHECK(t.deleted);
        const map_entry& o = entry_at(maps, other.start());
        CHECK(o.path == other.path());
        CHECK_FALSE(o.deleted);
    }
}

TEST_CASE("unmark_deleted: a path without the suffix is as printed and not deleted")
{
    auto p = tdctl::symbols::unmark_deleted(::getpid(), "/no/such/file", 42);
    CHECK(p.path == "/no/such/file");
    CHECK_FALSE(p.deleted);
    auto q = tdctl::symbols::unmark_deleted(::getpid(), "/no/such/file (deleted)", 42);
    CHECK(q.path == "/no/such/file");
    CHECK(q.deleted);
}
