#include "core/inject/link_map.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <cstring>
#include <elf.h>
#include <link.h>

namespace tdctl::core {

namespace {

constexpr int max_link_map_entries = 65536;
constexpr int max_dynamic_entries = 4096;
constexpr std::size_t max_path_bytes = 4096;

// A NUL-terminated string of at most max_path_bytes, read a page at most at
// a time so that a string near the end of a mapping reads whole.
std::string read_c_string(target_memory& memory, std::uint64_t address)
{
    std::string out;
    while (address != 0 && out.size() < max_path_bytes) {
        std::array<char, 256> buf{};
        std::size_t to_page_end = 4096 - (address % 4096);
        std::size_t want = std::min({buf.size(), to_page_end, max_path_bytes - out.size()});
        std::size_t got = memory.read(target_addr{address}, std::as_writable_bytes(std::span(buf.data(), want)));
        std::size_t len = strnlen(buf.data(), got);
        out.append(buf.data(), len);
        if (len < want)
            break;  // the NUL, or the end of what is readable
        address += want;
    }
    return out;
}

}  // namespace

std::optional<loader_rendezvous> find_loader_rendezvous(target_access& target)
{
    auto r_debug_sym = target.lookup_symbol("ld-linux", "_r_debug");
    if (!r_debug_sym)
        r_debug_sym = target.lookup_symbol("ld64.so", "_r_debug");
    if (!r_debug_sym)
        return std::nullopt;
    loader_rendezvous rv;
    rv.r_debug = r_debug_sym->address;
    std::uint64_t brk = 0;
    if (!target.memory().read_value(rv.r_debug + offsetof(struct r_debug, r_brk), brk) || brk == 0)
        return std::nullopt;
    rv.r_brk = target_addr{brk};
    auto notify = target.lookup_symbol("ld-linux", "_dl_debug_state");
    if (notify && notify->address == rv.r_brk)
        rv.r_brk_size = notify->size;
    return rv;
}

std::optional<link_map_state> read_link_map_state(target_memory& memory, const loader_rendezvous& rv)
{
    std::int32_t state = -1;
    if (!memory.read_value(rv.r_debug + offsetof(struct r_debug, r_state), state))
        return std::nullopt;
    switch (state) {
    case r_debug::RT_CONSISTENT: return link_map_state::consistent;
    case r_debug::RT_ADD: return link_map_state::adding;
    case r_debug::RT_DELETE: return link_map_state::deleting;
    default: return std::nullopt;
    }
}

std::optional<std::vector<link_map_entry>> read_link_map(target_memory& memory, const loader_rendezvous& rv)
{
    std::uint64_t map = 0;
    if (!memory.read_value(rv.r_debug + offsetof(struct r_debug, r_map), map))
        return std::nullopt;
    std::vector<link_map_entry> out;
    for (int n = 0; map != 0 && n < max_link_map_entries; ++n) {
        struct link_map lm{};
        if (!memory.read_value(target_addr{map}, lm))
            return std::nullopt;
        link_map_entry e;
        e.entry = target_addr{map};
        e.l_addr = target_addr{lm.l_addr};
        e.l_ld = target_addr{reinterpret_cast<std::uint64_t>(lm.l_ld)};
        e.name = read_c_string(memory, reinterpret_cast<std::uint64_t>(lm.l_name));
        out.push_back(std::move(e));
        map = reinterpret_cast<std::uint64_t>(lm.l_next);
    }
    return out;
}

std::optional<target_addr> read_init_function(target_memory& memory, const link_map_entry& module)
{
    if (module.l_ld.is_null())
        return std::nullopt;
    for (int i = 0; i < max_dynamic_entries; ++i) {
        Elf64_Dyn d{};
        if (!memory.read_value(module.l_ld + static_cast<std::uint64_t>(i) * sizeof d, d))
            return std::nullopt;
        if (d.d_tag == DT_NULL)
            return std::nullopt;
        if (d.d_tag == DT_INIT && d.d_un.d_ptr != 0)
            return module.l_addr + d.d_un.d_ptr;
    }
    return std::nullopt;
}

}  // namespace tdctl::core
