// ELF modules of the test process itself: libc, ld.so and this executable,
// checked against binutils output and the dynamic linker's own view.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include "base/error.hpp"
#include "symbols/elf_module.hpp"
#include "symbols_test_helpers.hpp"

using namespace tdctl;
using namespace tdctl::symbols;
using namespace tdctl::symbols::test;

extern "C" __attribute__((noinline, used)) int symbols_tests_marker(int x)
{
    // Enough code that +1 is still inside the function.
    volatile int v = x;
    for (int i = 0; i < 3; ++i)
        v = v * 3 + i;
    return v;
}

namespace {

// dlpi_addr (the load bias as ld.so knows it) of the first loaded object
// whose name ends with `suffix`.
std::optional<std::uint64_t> ld_bias_of(const std::string& suffix)
{
    struct query {
        std::string suffix;
        std::optional<std::uint64_t> bias;
    } q{suffix, std::nullopt};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
            auto* q = static_cast<query*>(data);
            std::string_view name = info->dlpi_name != nullptr ? info->dlpi_name : "";
            if (!q->bias && name.ends_with(q->suffix))
                q->bias = info->dlpi_addr;
            return 0;
        },
        &q);
    return q.bias;
}

const module_set& self_modules()
{
    static const module_set set = module_set::load(::getpid());
    return set;
}

const elf_module& libc_module()
{
    const elf_module* m = self_modules().find("libc.so.6");
    REQUIRE(m != nullptr);
    return *m;
}

// Serves reads from a copy of a file's first bytes placed at `base`, as if
// the first PT_LOAD (file offset 0 at p_vaddr 0) were mapped there.
class file_image_memory : public target_memory {
public:
    file_image_memory(std::vector<std::byte> bytes, std::uint64_t base) : bytes_(std::move(bytes)), base_(base) {}
    std::size_t read(target_addr addr, std::span<std::byte> out) override
    {
        if (addr.value < base_ || addr.value >= base_ + bytes_.size())
            return 0;
        std::size_t off = addr.value - base_;
        std::size_t n = std::min(out.size(), bytes_.size() - off);
        std::copy_n(bytes_.begin() + static_cast<std::ptrdiff_t>(off), n, out.begin());
        return n;
    }
    bool write(target_addr, std::span<const std::byte>) override { return false; }
    std::vector<std::byte>& bytes() { return bytes_; }

private:
    std::vector<std::byte> bytes_;
    std::uint64_t base_;
};

std::vector<std::byte> read_file_prefix(const std::string& path, std::size_t size)
{
    std::ifstream in(path, std::ios::binary);
    std::vector<char> chars(size);
    in.read(chars.data(), static_cast<std::streamsize>(size));
    chars.resize(static_cast<std::size_t>(in.gcount()));
    std::vector<std::byte> out(chars.size());
    std::transform(chars.begin(), chars.end(), out.begin(), [](char c) { return std::byte(static_cast<unsigned char>(c)); });
    return out;
}

std::vector<std::byte> hex_bytes(const std::string& hex)
{
    std::vector<std::byte> out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(std::byte(static_cast<unsigned char>(std::stoul(hex.substr(i, 2), nullptr, 16))));
    return out;
}

}  // namespace

TEST_CASE("module_set of the test process finds libc once, at the bias ld.so reports")
{
    const module_set& set = self_modules();
    INFO("skipped: " << set.skipped().size());
    for (const std::string& s : set.skipped())
        MESSAGE("skipped module: " << s);
    CHECK(set.skipped().empty());

    const elf_module& libc = libc_module();
    CHECK(libc.soname() == "libc.so.6");
    auto bias = ld_bias_of("libc.so.6");
    REQUIRE(bias.has_value());
    CHECK(libc.load_bias().value == *bias);
    CHECK(std::ranges::count_if(set.modules(), [&](const auto& m) { return m->path() == libc.path(); }) == 1);
    CHECK(libc.start() <= libc.load_bias() + 0x1000);
    CHECK(libc.end() > libc.start());
    CHECK(set.containing(libc.load_bias() + 0x1000) == &libc);
}

TEST_CASE("lookup __nptl_create_event in libc matches nm -D plus the load bias, and dlsym")
{
    const elf_module& libc = libc_module();
    auto value = nm_value(libc.path(), "__nptl_create_event@@GLIBC_PRIVATE", true);
    if (!value) {
        FAIL("nm -D does not list __nptl_create_event@@GLIBC_PRIVATE in " << libc.path());
    }
    auto found = libc.lookup_with_source("__nptl_create_event");
    REQUIRE(found.has_value());
    const symbol& s = found->first;
    CHECK(found->second == symbol_source::dynsym);
    CHECK(s.name == "__nptl_create_event");
    CHECK(s.version == "GLIBC_PRIVATE");
    CHECK(s.type == STT_FUNC);
    CHECK(s.binding == STB_GLOBAL);
    CHECK(s.address.value == libc.load_bias().value + *value);

    void* by_dlsym = ::dlsym(RTLD_DEFAULT, "__nptl_create_event");
    REQUIRE(by_dlsym != nullptr);
    CHECK(s.address.value == reinterpret_cast<std::uint64_t>(by_dlsym));

    // The set-wide lookup gives the same answer.
    auto any = self_modules().lookup("__nptl_create_event");
    REQUIRE(any.has_value());
    CHECK(any->address == s.address);
}

TEST_CASE("versioned lookups: @@ for the default version, @ for hidden ones, wrong versions fail")
{
    const elf_module& libc = libc_module();
    auto plain = libc.lookup("__nptl_create_event");
    REQUIRE(plain.has_value());

    auto with_default = libc.lookup("__nptl_create_event@@GLIBC_PRIVATE");
    REQUIRE(with_default.has_value());
    CHECK(with_default->address == plain->address);
    CHECK(with_default->version == "GLIBC_PRIVATE");
    CHECK(libc.lookup("__nptl_create_event@GLIBC_PRIVATE").has_value());
    CHECK_FALSE(libc.lookup("__nptl_create_event@@GLIBC_2.2.5").has_value());
    CHECK_FALSE(libc.lookup("__nptl_create_event@GLIBC_2.2.5").has_value());
    CHECK_FALSE(libc.lookup("__nptl_create_event@@NO_SUCH_VERSION").has_value());

    // A hidden (non-default) version as nm -D prints it, "name@VER", of a name
    // that also has a default "name@@VER2" elsewhere (memcpy on x86_64).
    std::vector<nm_symbol> dyn = nm_symbols(libc.path(), true);
    auto base_of = [](const std::string& n) { return n.substr(0, n.find('@')); };
    auto is_hidden = [](const std::string& n) {
        return n.find('@') != std::string::npos && n.find("@@") == std::string::npos;
    };
    const nm_symbol* hidden = nullptr;
    const nm_symbol* def = nullptr;
    for (const nm_symbol& h : dyn) {
        if (!is_hidden(h.name))
            continue;
        auto d = std::ranges::find_if(dyn, [&](const nm_symbol& s) {
            return s.name.starts_with(base_of(h.name) + "@@") && s.value != h.value;
        });
        if (d != dyn.end()) {
            hidden = &h;
            def = &*d;
            break;
        }
    }
    if (hidden == nullptr) {
        MESSAGE("no name with both a hidden and a default version in nm -D output of " << libc.path()
                                                                                       << "; skipped");
        return;
    }
    INFO("hidden: " << hidden->name << ", default: " << def->name);
    const std::string base = base_of(hidden->name);
    const std::string version = hidden->name.substr(base.size() + 1);
    auto h = libc.lookup(hidden->name);
    REQUIRE(h.has_value());
    CHECK(h->address.value == libc.load_bias().value + hidden->value);
    CHECK(h->name == base);
    CHECK(h->version == version);
    CHECK_FALSE(libc.lookup(base + "@@" + version).has_value());

    // The plain name resolves to the default version, not the hidden one.
    auto p = libc.lookup(base);
    REQUIRE(p.has_value());
    CHECK(p->address.value == libc.load_bias().value + def->value);
    CHECK(p->version == def->name.substr(base.size() + 2));
    auto d = libc.lookup(def->name);
    REQUIRE(d.has_value());
    CHECK(d->address == p->address);
}

TEST_CASE("__nptl_initial_report_events is found in ld.so's .dynsym")
{
    const elf_module* ld = self_modules().find("ld-linux");
    REQUIRE(ld != nullptr);
    auto bias = ld_bias_of("ld-linux-x86-64.so.2");
    REQUIRE(bias.has_value());
    CHECK(ld->load_bias().value == *bias);

    auto value = nm_value(ld->path(), "__nptl_initial_report_events@@GLIBC_PRIVATE", true);
    if (!value) {
        FAIL("nm -D does not list __nptl_initial_report_events in " << ld->path());
    }
    auto found = ld->lookup_with_source("__nptl_initial_report_events");
    REQUIRE(found.has_value());
    CHECK(found->second == symbol_source::dynsym);
    CHECK(found->first.address.value == *bias + *value);
    CHECK(found->first.type == STT_OBJECT);
    // libc does not define it, so the set-wide lookup lands in ld.so.
    CHECK_FALSE(libc_module().lookup("__nptl_initial_report_events").has_value());
    auto any = self_modules().lookup("__nptl_initial_report_events");
    REQUIRE(any.has_value());
    CHECK(any->address == found->first.address);
}

TEST_CASE("__concurrency_level comes from libc's separate debug file")
{
    const elf_module& libc = libc_module();
    std::string id = readelf_build_id(libc.path());
    REQUIRE_FALSE(id.empty());
    std::string debug_path = "/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
    if (!std::filesystem::exists(debug_path)) {
        FAIL("no debug file " << debug_path << " for this libc (scripts/setup-debian.sh installs libc6-dbg)");
    }
    auto value = nm_value(debug_path, "__concurrency_level", false);
    REQUIRE(value.has_value());

    // Not in the stripped file's own tables.
    CHECK(nm_value(libc.path(), "__concurrency_level", true) == std::nullopt);

    auto found = libc.lookup_with_source("__concurrency_level");
    REQUIRE(found.has_value());
    CHECK(found->second == symbol_source::debug_file);
    CHECK(found->first.address.value == libc.load_bias().value + *value);
    CHECK(found->first.binding == STB_LOCAL);
    CHECK(libc.has_debug_file());
    CHECK(libc.has_symtab());
    CHECK(std::filesystem::equivalent(libc.debug_file_path(), debug_path));

    // Symbols in both: the stripped file's .dynsym answers first.
    auto create = libc.lookup_with_source("__nptl_create_event");
    REQUIRE(create.has_value());
    CHECK(create->second == symbol_source::dynsym);
}

TEST_CASE("build_id matches readelf -n and the note in the test's own memory")
{
    const elf_module& libc = libc_module();
    std::string id = readelf_build_id(libc.path());
    REQUIRE_FALSE(id.empty());
    CHECK(libc.build_id() == id);

    self_memory mem;
    CHECK(libc.build_id_matches(mem) == std::optional<bool>(true));
    for (const auto& m : self_modules().modules()) {
        INFO("module " << m->path());
        if (!m->build_id().empty())
            CHECK(m->build_id_matches(mem) == std::optional<bool>(true));
    }
}

TEST_CASE("build_id_matches is false for another build-id in memory and unknown for unreadable memory")
{
    const std::string path = libc_module().path();
    const std::string id = readelf_build_id(path);
    REQUIRE_FALSE(id.empty());
    const std::uint64_t base = 0x10000000;
    auto module = elf_module::open_file(path, target_addr{base});
    REQUIRE(module != nullptr);

    file_image_memory mem(read_file_prefix(path, 64 * 1024), base);
    CHECK(module->build_id_matches(mem) == std::optional<bool>(true));

    std::vector<std::byte> wanted = hex_bytes(id);
    auto at = std::search(mem.bytes().begin(), mem.bytes().end(), wanted.begin(), wanted.end());
    REQUIRE(at != mem.bytes().end());
    *at ^= std::byte{0xff};
    CHECK(module->build_id_matches(mem) == std::optional<bool>(false));

    file_image_memory nothing({}, base);
    CHECK(module->build_id_matches(nothing) == std::nullopt);
}

TEST_CASE("open_file: file addresses with bias 0, soname, and no match for undefined symbols")
{
    const std::string path = libc_module().path();
    auto module = elf_module::open_file(path, target_addr{0});
    REQUIRE(module != nullptr);
    CHECK(module->soname() == "libc.so.6");
    CHECK(module->build_id() == libc_module().build_id());
    auto value = nm_value(path, "__nptl_version@@GLIBC_PRIVATE", true);
    REQUIRE(value.has_value());
    auto s = module->lookup("__nptl_version");
    REQUIRE(s.has_value());
    CHECK(s->address.value == *value);

    // libc imports __nptl_change_stack_perm from ld.so: present in .dynsym,
    // but undefined, so it must not resolve here.
    auto undefined = run_command("nm -D --undefined-only '" + path + "'");
    REQUIRE(undefined.has_value());
    if (undefined->find("__nptl_change_stack_perm") != std::string::npos)
        CHECK_FALSE(module->lookup("__nptl_change_stack_perm").has_value());
    CHECK_FALSE(module->lookup("no_such_symbol_anywhere_42").has_value());

    // Not an ELF file: nullptr, not an exception.
    CHECK(elf_module::open_file("/proc/self/cmdline", target_addr{0}) == nullptr);
    CHECK_THROWS_AS(elf_module::open_file("/nonexistent/file.so", target_addr{0}), tdctl::error);
}

TEST_CASE("main_executable, containing and describe for a function of this test")
{
    const module_set& set = self_modules();
    const elf_module* exe = set.main_executable();
    REQUIRE(exe != nullptr);
    CHECK(std::filesystem::equivalent(exe->path(), "/proc/self/exe"));

    auto marker = target_addr{reinterpret_cast<std::uint64_t>(&symbols_tests_marker)};
    CHECK(set.containing(marker) == exe);
    CHECK(exe->is_executable_mapping(marker));
    auto s = exe->lookup("symbols_tests_marker");
    REQUIRE(s.has_value());
    CHECK(s->address == marker);
    REQUIRE(s->size > 1);

    CHECK(set.describe(marker) == "symbols_tests_marker");
    CHECK(set.describe(marker + 1) == "symbols_tests_marker+0x1");
    CHECK(set.describe(marker + static_cast<std::int64_t>(s->size - 1)) ==
          fmt::format("symbols_tests_marker+{:#x}", s->size - 1));

    // A libc function, through .dynsym.
    auto create = set.lookup("__nptl_create_event");
    REQUIRE(create.has_value());
    std::string d = set.describe(create->address);
    CHECK_FALSE(d.empty());
    CHECK(d.find('+') == std::string::npos);
    auto named = set.lookup(d);
    REQUIRE(named.has_value());
    CHECK(named->address == create->address);

    // Nothing is mapped at page 0.
    CHECK(set.describe(target_addr{0x10}) == "");
    CHECK(set.containing(target_addr{0x10}) == nullptr);
}

TEST_CASE("lookups after the first are hash lookups, not table scans")
{
    // A miss goes through .dynsym, .symtab and the debug file's .symtab (tens
    // of thousands of entries for libc). Scanning them would take seconds for
    // this many lookups; hashed, it takes milliseconds.
    const elf_module& libc = libc_module();
    CHECK_FALSE(libc.lookup("no_such_symbol_anywhere_42").has_value());  // builds the tables
    auto t0 = std::chrono::steady_clock::now();
    int hits = 0;
    for (int i = 0; i < 100000; ++i) {
        hits += libc.lookup("no_such_symbol_anywhere_42").has_value() ? 1 : 0;
        hits += libc.lookup("__nptl_version").has_value() ? 1 : 0;
    }
    auto elapsed = std::chrono::steady_clock::now() - t0;
    CHECK(hits == 100000);
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer instruments every probe of the hash tables: hashed
    // lookups take seconds there too. The bound holds in the other builds.
    MESSAGE("200,000 lookups: " << std::chrono::duration<double>(elapsed).count() << " s");
#else
    CHECK(elapsed < std::chrono::seconds(2));
#endif
}
