// core/link_map on a memory image laid out as glibc's loader lays out its
// rendezvous: r_debug, a list of link_map entries, a dynamic section. No target.
#include <doctest/doctest.h>

#include <cstring>
#include <elf.h>
#include <link.h>
#include <string>

#include "core/inject/late_routing.hpp"
#include "core/inject/link_map.hpp"
#include "tests/support/image_memory.hpp"

using namespace tdctl;

namespace {

struct loader_image {
    test::image_memory memory;
    core::loader_rendezvous rv;

    template <typename T>
    void put(std::uint64_t address, const T& value)
    {
        std::memcpy(&memory.at(address), &value, sizeof value);
    }
    void put_string(std::uint64_t address, const std::string& s)
    {
        std::memcpy(&memory.at(address), s.c_str(), s.size() + 1);
    }

    loader_image()
    {
        const std::uint64_t b = memory.base;
        rv.r_debug = target_addr{b};
        rv.r_brk = target_addr{b + 0x9000};
        struct r_debug rd{};
        rd.r_version = 1;
        rd.r_state = r_debug::RT_CONSISTENT;
        rd.r_map = reinterpret_cast<struct link_map*>(b + 0x100);
        put(b, rd);
        // Three entries: the executable (no name), a library with a DT_INIT,
        // one without; the second library's name ends right at a page end.
        const std::uint64_t entries[3] = {b + 0x100, b + 0x200, b + 0x300};
        const std::uint64_t names[3] = {b + 0x1000, b + 0x1100, b + 0x2ffa};
        const std::uint64_t biases[3] = {0, 0x7f0000000000, 0x7f0000100000};
        const std::uint64_t dynamics[3] = {0, b + 0x4000, b + 0x5000};
        put_string(names[0], "");
        put_string(names[1], "/usr/lib/x86_64-linux-gnu/libwith_init.so.1");
        put_string(names[2], "/x/noinit.so");
        for (int i = 0; i < 3; ++i) {
            struct link_map lm{};
            lm.l_addr = biases[i];
            lm.l_name = reinterpret_cast<char*>(names[i]);
            lm.l_ld = reinterpret_cast<ElfW(Dyn)*>(dynamics[i]);
            lm.l_next = i < 2 ? reinterpret_cast<struct link_map*>(entries[i + 1]) : nullptr;
            put(entries[i], lm);
        }
        const Elf64_Dyn with_init[] = {{DT_NEEDED, {1}}, {DT_INIT, {0x1000}}, {DT_NULL, {0}}};
        const Elf64_Dyn without[] = {{DT_NEEDED, {1}}, {DT_INIT_ARRAY, {0x3de8}}, {DT_NULL, {0}}};
        put(b + 0x4000, with_init);
        put(b + 0x5000, without);
    }
};

}  // namespace

TEST_CASE("read_link_map: every entry in list order, with bias, dynamic section and name")
{
    loader_image img;
    auto list = core::read_link_map(img.memory, img.rv);
    REQUIRE(list.has_value());
    REQUIRE(list->size() == 3);
    CHECK((*list)[0].name.empty());
    CHECK((*list)[0].l_addr.value == 0);
    CHECK((*list)[1].name == "/usr/lib/x86_64-linux-gnu/libwith_init.so.1");
    CHECK((*list)[1].l_addr.value == 0x7f0000000000);
    CHECK((*list)[1].entry.value == img.memory.base + 0x200);
    CHECK((*list)[2].name == "/x/noinit.so");   // crosses a page boundary
    CHECK((*list)[2].l_ld.value == img.memory.base + 0x5000);
}

TEST_CASE("read_link_map: an entry that cannot be read fails the walk")
{
    loader_image img;
    struct link_map lm{};
    std::memcpy(&lm, &img.memory.at(img.memory.base + 0x300), sizeof lm);
    lm.l_next = reinterpret_cast<struct link_map*>(0x10);   // unmapped
    img.put(img.memory.base + 0x300, lm);
    CHECK_FALSE(core::read_link_map(img.memory, img.rv).has_value());
}

TEST_CASE("read_link_map_state: r_state as the loader writes it")
{
    loader_image img;
    CHECK(core::read_link_map_state(img.memory, img.rv) == core::link_map_state::consistent);
    img.put<std::int32_t>(img.memory.base + offsetof(struct r_debug, r_state), r_debug::RT_ADD);
    CHECK(core::read_link_map_state(img.memory, img.rv) == core::link_map_state::adding);
    img.put<std::int32_t>(img.memory.base + offsetof(struct r_debug, r_state), r_debug::RT_DELETE);
    CHECK(core::read_link_map_state(img.memory, img.rv) == core::link_map_state::deleting);
    img.put<std::int32_t>(img.memory.base + offsetof(struct r_debug, r_state), 7);
    CHECK_FALSE(core::read_link_map_state(img.memory, img.rv).has_value());
}

TEST_CASE("read_init_function: DT_INIT plus the load bias; none without DT_INIT or a dynamic section")
{
    loader_image img;
    auto list = core::read_link_map(img.memory, img.rv);
    REQUIRE(list.has_value());
    CHECK(core::read_init_function(img.memory, (*list)[1]) == std::optional<target_addr>(target_addr{0x7f0000001000}));
    CHECK_FALSE(core::read_init_function(img.memory, (*list)[2]).has_value());
    CHECK_FALSE(core::read_init_function(img.memory, (*list)[0]).has_value());
}

TEST_CASE("module_guard: the entry's l_addr must still hold the bias")
{
    loader_image img;
    auto list = core::read_link_map(img.memory, img.rv);
    REQUIRE(list.has_value());
    auto g = core::module_guard((*list)[1]);
    CHECK(g.address == (*list)[1].entry);
    CHECK(g.length == 8);
    std::uint64_t v = 0;
    std::memcpy(&v, g.value.data(), 8);
    CHECK(v == 0x7f0000000000);
}
