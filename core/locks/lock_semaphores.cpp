#include "core/locks/lock_semaphores.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <vector>

namespace tdctl::core {

namespace {

constexpr std::string_view agent_module = "libtdagent.so";
// A slot's key when empty (the end of every probe sequence through it).
constexpr std::uint64_t empty_key = 0;
// The most slots a lookup reads, whatever the agent says (one small read).
constexpr std::uint32_t max_probes = 256;

}  // namespace

std::optional<lock_semaphore_table> find_lock_semaphores(target_access& target)
{
    if (!target.has_module(agent_module))
        return std::nullopt;
    auto slots = target.lookup_symbol(agent_module, "__tdagent_lock_sems");
    auto shape = target.lookup_symbol(agent_module, "__tdagent_lock_sems_shape");
    auto hash = target.lookup_symbol(agent_module, "__tdagent_lock_sems_hash");
    if (!slots || !shape || !hash)
        return std::nullopt;
    std::array<std::uint32_t, 4> s{};
    lock_semaphore_table t;
    if (!target.memory().read_value(shape->address, s) || !target.memory().read_value(hash->address, t.hash))
        return std::nullopt;
    t.slots = slots->address;
    t.count = s[0];
    t.probes = s[1];
    t.slot_size = s[2];
    t.holder_offset = s[3];
    const bool known = std::has_single_bit(t.count) && t.count > 1 && t.probes > 0 && t.probes <= max_probes &&
                       t.slot_size >= sizeof(std::uint64_t) && t.holder_offset >= sizeof(std::uint64_t) &&
                       t.holder_offset + sizeof(std::int32_t) <= t.slot_size;
    if (!known)
        return std::nullopt;
    return t;
}

std::uint32_t lock_semaphore_first_slot(const lock_semaphore_table& table, target_addr sem)
{
    const int bits = std::countr_zero(table.count);
    return static_cast<std::uint32_t>(((sem.value >> 3) * table.hash) >> (64 - bits));
}

std::optional<pid_t> lock_semaphore_holder(target_memory& memory, const lock_semaphore_table& table, target_addr sem)
{
    if (sem.is_null())
        return std::nullopt;
    // The probe window, read in at most two pieces (it may wrap).
    const std::uint32_t first = lock_semaphore_first_slot(table, sem);
    const std::uint32_t n = std::min(table.probes, table.count);
    std::vector<std::byte> window(static_cast<std::size_t>(n) * table.slot_size);
    const std::uint32_t before_end = std::min(n, table.count - first);
    const std::size_t head = static_cast<std::size_t>(before_end) * table.slot_size;
    if (memory.read(table.slots + static_cast<std::int64_t>(first) * table.slot_size,
                    std::span(window).first(head)) != head)
        return std::nullopt;
    if (head < window.size() && memory.read(table.slots, std::span(window).subspan(head)) != window.size() - head)
        return std::nullopt;
    for (std::uint32_t i = 0; i < n; ++i) {
        const std::byte* slot = window.data() + static_cast<std::size_t>(i) * table.slot_size;
        std::uint64_t key = 0;
        std::int32_t holder = 0;
        std::memcpy(&key, slot, sizeof key);
        std::memcpy(&holder, slot + table.holder_offset, sizeof holder);
        if (key == sem.value)
            return holder > 0 ? holder : 0;
        if (key == empty_key)
            return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace tdctl::core
