// symbol_table::find_hashed against the whole table's find() on the
// machine's own libraries, every name of their .dynsym and every version of
// it; and on a copy of libc whose .gnu.hash is overwritten with random bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include <elf.h>
#include <gelf.h>

#include "symbols/elf_file.hpp"
#include "symbols/symbol_table.hpp"

using namespace tdctl::symbols;

namespace {

// The same entry, field by field.
void check_same(const table_entry& fast, const table_entry& slow)
{
    CHECK(fast.name == slow.name);
    CHECK(fast.version == slow.version);
    CHECK(fast.value == slow.value);
    CHECK(fast.size == slow.size);
    CHECK(fast.type == slow.type);
    CHECK(fast.binding == slow.binding);
    CHECK(fast.hidden == slow.hidden);
    CHECK(fast.absolute == slow.absolute);
}

struct compared {
    std::size_t queries = 0, hashed = 0;
};

// Every name of the file's .dynsym, plain, as "name@VER" and "name@@VER" for
// each version it has, and a name it does not have: whenever find_hashed
// answers, find() on the whole table answers the same.
compared compare_all(const elf_file& file)
{
    compared c;
    Elf_Scn* dynsym = file.section_by_type(SHT_DYNSYM);
    REQUIRE(dynsym != nullptr);
    const symbol_table full = symbol_table::read(file, dynsym);
    std::set<std::string> queries{"no_such_symbol_anywhere_42"};
    for (const table_entry& e : full.entries()) {
        queries.insert(std::string(e.name));
        if (!e.version.empty()) {
            queries.insert(std::string(e.name) + "@" + std::string(e.version));
            queries.insert(std::string(e.name) + "@@" + std::string(e.version));
        }
    }
    for (const std::string& text : queries) {
        CAPTURE(text);
        const symbol_query q = symbol_query::parse(text);
        const auto fast = symbol_table::find_hashed(file, dynsym, q);
        const table_entry* slow = full.find(q);
        ++c.queries;
        if (!fast)
            continue;
        ++c.hashed;
        REQUIRE(slow != nullptr);
        check_same(*fast, *slow);
    }
    return c;
}

std::string libc_path()
{
    for (const char* p : {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"})
        if (std::filesystem::exists(p))
            return p;
    return {};
}

}  // namespace

TEST_CASE("find_hashed answers as the whole .dynsym's find() for every name and version of real libraries")
{
    const std::string libc = libc_path();
    REQUIRE_FALSE(libc.empty());
    const std::string dir = std::filesystem::path(libc).parent_path();
    for (const std::string& path : {libc, dir + "/ld-linux-x86-64.so.2", dir + "/libstdc++.so.6", dir + "/libm.so.6",
                                    dir + "/libelf.so.1", std::string("/proc/self/exe")}) {
        CAPTURE(path);
        auto file = elf_file::try_open(path);
        if (!file)
            continue;  // not on this machine
        auto c = compare_all(*file);
        MESSAGE(path << ": " << c.hashed << " of " << c.queries << " queries answered through .gnu.hash");
        if (path == libc) {
            // libc exports thousands of names: nearly all of them hashed.
            CHECK(c.queries > 3000);
            CHECK(c.hashed * 10 > c.queries * 9);
        }
    }
}

TEST_CASE("find_hashed on 100 copies of libc with random bytes over .gnu.hash: no fault, and any answer is an entry "
          "of that name in the table")
{
    const std::string libc = libc_path();
    REQUIRE_FALSE(libc.empty());
    char dir_template[] = "/tmp/tdctl-gnuhash-XXXXXX";
    REQUIRE(::mkdtemp(dir_template) != nullptr);
    const std::string copy = std::string(dir_template) + "/libc.so.6";
    std::filesystem::copy_file(libc, copy);

    // Where .gnu.hash is in the file.
    std::uint64_t offset = 0, size = 0;
    {
        auto file = elf_file::try_open(copy);
        REQUIRE(file.has_value());
        Elf_Scn* scn = file->section_by_type(SHT_GNU_HASH);
        REQUIRE(scn != nullptr);
        GElf_Shdr sh;
        REQUIRE(gelf_getshdr(scn, &sh) != nullptr);
        offset = sh.sh_offset;
        size = sh.sh_size;
    }
    REQUIRE(size >= 16);
    std::vector<unsigned char> original(size);
    {
        int fd = ::open(copy.c_str(), O_RDONLY);
        REQUIRE(fd >= 0);
        REQUIRE(::pread(fd, original.data(), size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size));
        ::close(fd);
    }

    std::mt19937_64 rng(20261204);
    const std::vector<std::string> names = {"__nptl_create_event", "__nptl_death_event", "malloc", "pthread_create",
                                            "memcpy@GLIBC_2.2.5", "_thread_db_pthread_report_events", "nope"};
    std::size_t answered = 0;
    for (int attempt = 0; attempt < 100; ++attempt) {
        CAPTURE(attempt);
        // Each try damages the intact hash once: random bytes over its header
        // words, or over a stretch of its bloom words, buckets or chain.
        std::vector<unsigned char> noise(original);
        const std::uint64_t at = attempt % 4 == 0 ? 0 : rng() % (size - 1);
        const std::uint64_t n = std::min<std::uint64_t>(1 + rng() % 64, size - at);
        for (std::uint64_t k = 0; k < n; ++k)
            noise[at + k] = static_cast<unsigned char>(rng());
        int fd = ::open(copy.c_str(), O_WRONLY);
        REQUIRE(fd >= 0);
        REQUIRE(::pwrite(fd, noise.data(), size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size));
        ::close(fd);

        auto file = elf_file::try_open(copy);
        REQUIRE(file.has_value());
        Elf_Scn* dynsym = file->section_by_type(SHT_DYNSYM);
        const symbol_table full = symbol_table::read(*file, dynsym);
        for (const std::string& text : names) {
            CAPTURE(text);
            const symbol_query q = symbol_query::parse(text);
            auto fast = symbol_table::find_hashed(*file, dynsym, q);
            if (!fast)
                continue;
            ++answered;
            // A damaged chain may hide a symbol (the caller then reads the
            // table), but what it finds is a real entry of that name.
            const table_entry* slow = full.find(q);
            REQUIRE(slow != nullptr);
            CHECK(fast->name == slow->name);
        }
    }
    MESSAGE(answered << " answers through the damaged hashes");
    std::filesystem::remove_all(dir_template);
}
