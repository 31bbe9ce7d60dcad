#include "core/inject/got_routing.hpp"

#include <array>
#include <cstdint>
#include <cstddef>
#include <algorithm>
#include <cstring>
#include <link.h>

#include <fmt/format.h>

#include "base/log.hpp"

namespace tdctl::core {

namespace {

constexpr std::array<std::string_view, 43> wrapped = {
    "pthread_create", "pthread_exit", "pthread_detach", "pthread_join", "pthread_tryjoin_np",
    "pthread_timedjoin_np", "pthread_clockjoin_np", "pthread_mutex_lock", "pthread_mutex_trylock",
    "pthread_mutex_timedlock", "pthread_mutex_clocklock", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock",
    "pthread_rwlock_timedrdlock", "pthread_rwlock_timedwrlock", "pthread_rwlock_clockrdlock",
    "pthread_rwlock_clockwrlock", "pthread_spin_lock", "pthread_cond_wait", "pthread_cond_timedwait",
    "pthread_cond_clockwait", "sem_init", "sem_destroy", "sem_post", "sem_wait", "sem_trywait", "sem_timedwait",
    "sem_clockwait", "pthread_barrier_wait",
    "pthread_setconcurrency", "pthread_getconcurrency", "sigaction", "signal", "bsd_signal", "sysv_signal",
    "execve", "execvpe", "execv", "execvp", "fexecve", "execl", "execlp", "execle"};

constexpr std::string_view agent_module = "libtdagent.so";

// Modules whose calls are not routed: libc's own calls are internal (and it
// is where the agent forwards to), the loader calls none, the agent's go
// to libc on purpose.
bool is_excluded_here(const symbols::elf_module& m)
{
    std::string name = m.soname();
    return name.starts_with("libc.so") || name.starts_with("ld-linux") || name.starts_with("ld64.so") ||
           name.starts_with(agent_module);
}

bool is_wrapped(std::string_view name)
{
    for (auto w : wrapped)
        if (w == name)
            return true;
    return false;
}

// The agent forwards to libc's default version of each function. A slot
// bound to another version keeps its binding when that version is other
// code (pthread_cond_wait@GLIBC_2.2.5, the old condition variables); one
// bound to an alias of the same code (pthread_create@GLIBC_2.2.5: the
// versions libpthread had, kept by libc 2.34 at the new symbol's address,
// as in programs built against an older glibc, node) is routed.
bool binds_other_code(const symbols::elf_module* libc, const symbols::import_slot& slot)
{
    if (libc == nullptr || slot.version.empty())
        return false;
    auto natural = libc->lookup(slot.name);
    if (!natural || natural->version == slot.version)
        return false;
    auto bound = libc->lookup(fmt::format("{}@{}", slot.name, slot.version));
    return !bound || bound->address != natural->address;
}

// Routes one module's slots; returns the slots it rewrote.
std::vector<target_addr> route_module(const symbols::elf_module& m, const symbols::elf_module& agent,
                                      const symbols::elf_module* libc, change_journal& journal,
                                      target_memory& memory, const std::optional<change_guard>& guard,
                                      routing_tally& tally)
{
    std::vector<target_addr> routed;
    for (const auto& slot : m.import_slots()) {
        if (!is_wrapped(slot.name))
            continue;
        auto wrapper = agent.lookup(slot.name);
        if (!wrapper)
            continue;
        if (binds_other_code(libc, slot)) {
            ++tally.other_version;
            continue;
        }
        std::uint64_t now = 0;
        if (!memory.read_value(slot.address, now)) {
            tally.problems.push_back(fmt::format("{}: GOT slot of {} at {:#x} unreadable", m.path(), slot.name,
                                                 slot.address.value));
            continue;
        }
        if (now == wrapper->address.value && !journal.contains(slot.address)) {
            ++tally.already;
            continue;
        }
        if (!journal.write_value(slot.address, wrapper->address.value, change_kind::got_entry, guard)) {
            tally.problems.push_back(fmt::format("{}: GOT slot of {} at {:#x} not writable", m.path(), slot.name,
                                                 slot.address.value));
            continue;
        }
        log::debug("GOT {} {}@{:#x}: {:#x} -> {:#x}", m.path(), slot.name, slot.address.value, now,
                   wrapper->address.value);
        routed.push_back(slot.address);
    }
    return routed;
}

// Routes `m` and adds what it did to the tally.
void route_into_tally(const symbols::elf_module& m, const symbols::elf_module& agent, const symbols::elf_module* libc,
                      change_journal& journal, target_memory& memory, const std::optional<change_guard>& guard,
                      routing_tally& tally)
{
    try {
        auto slots = route_module(m, agent, libc, journal, memory, guard, tally);
        if (slots.empty())
            return;
        tally.slots += slots.size();
        ++tally.modules;
        tally.routed.push_back(routed_module{m.path(), m.load_bias(), std::move(slots)});
    } catch (const std::exception& e) {
        tally.problems.push_back(e.what());
    }
}

}  // namespace

std::span<const std::string_view> agent_wrapped_functions() { return wrapped; }

bool is_excluded_from_routing(const symbols::elf_module& m) { return is_excluded_here(m); }

void route_module_to_agent(const symbols::elf_module& m, const symbols::module_set& modules, change_journal& journal,
                           target_memory& memory, std::optional<change_guard> guard, routing_tally& tally)
{
    const auto* agent = modules.find(agent_module);
    if (agent == nullptr) {
        tally.problems.push_back("libtdagent.so is not loaded");
        return;
    }
    if (!is_excluded_here(m))
        route_into_tally(m, *agent, modules.find("libc.so.6"), journal, memory, guard, tally);
}

routing_tally route_to_agent(const symbols::module_set& modules, change_journal& journal, target_memory& memory,
                             const routing_guard& guard)
{
    routing_tally tally;
    const auto* agent = modules.find(agent_module);
    if (agent == nullptr) {
        tally.problems.push_back("libtdagent.so is not loaded");
        return tally;
    }
    const auto* libc = modules.find("libc.so.6");
    for (const auto& m : modules.modules())
        if (!is_excluded_here(*m))
            route_into_tally(*m, *agent, libc, journal, memory, guard ? guard(*m) : std::nullopt, tally);
    return tally;
}

std::optional<bool> agent_precedes_libc(target_access& target)
{
    auto r_debug_sym = target.lookup_symbol("ld-linux", "_r_debug");
    if (!r_debug_sym)
        return std::nullopt;
    auto& memory = target.memory();
    std::uint64_t map = 0;
    if (!memory.read_value(r_debug_sym->address + offsetof(struct r_debug, r_map), map))
        return std::nullopt;
    // A bounded walk: a corrupted list must not hang us.
    for (int n = 0; map != 0 && n < 4096; ++n) {
        std::uint64_t name_address = 0, next = 0;
        if (!memory.read_value(target_addr{map + offsetof(struct link_map, l_name)}, name_address) ||
            !memory.read_value(target_addr{map + offsetof(struct link_map, l_next)}, next))
            return std::nullopt;
        std::array<char, 512> name{};
        std::size_t got = name_address == 0 ? 0 : memory.read(target_addr{name_address}, std::as_writable_bytes(std::span(name)));
        std::string_view path(name.data(), strnlen(name.data(), std::min(got, name.size())));
        std::string_view file = path.substr(path.rfind('/') == std::string_view::npos ? 0 : path.rfind('/') + 1);
        if (file.starts_with(agent_module))
            return true;
        if (file.starts_with("libc.so"))
            return false;
        map = next;
    }
    return std::nullopt;
}

}  // namespace tdctl::core
