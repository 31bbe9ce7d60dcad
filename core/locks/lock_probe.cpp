#include "core/locks/lock_probe.hpp"

#include <cstddef>

namespace tdctl::core {

events::lock_kind lock_kind_of(std::span<const events::stack_frame> frames)
{
    using events::lock_kind;
    for (const auto& f : frames) {
        const std::string_view fn = f.function;
        // The reporting function and the agent's report helper name no kind.
        if (fn.starts_with("__tdagent_event") || fn == "tdagent_report")
            continue;
        if (fn.find("rwlock") != std::string_view::npos)
            return lock_kind::rwlock;
        if (fn.find("mutex") != std::string_view::npos)
            return lock_kind::mutex;
        if (fn.find("spin") != std::string_view::npos)
            return lock_kind::spin;
        if (fn.starts_with("sem_") || fn.starts_with("__new_sem_"))
            return lock_kind::semaphore;
    }
    return lock_kind::unknown;
}

void drop_reporter_frames(std::vector<events::stack_frame>& frames, const symbols::module_set& modules)
{
    if (frames.empty())
        return;
    const symbols::elf_module* reporter = modules.containing(frames.front().pc);
    if (reporter == nullptr)
        return;
    // Frame 0's pc is where the thread stands; the others are return addresses.
    std::size_t inside = 1;
    while (inside < frames.size() && frames[inside].pc.value != 0 &&
           modules.containing(target_addr{frames[inside].pc.value - 1}) == reporter)
        ++inside;
    frames.erase(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(inside));
}

std::optional<pid_t> lock_owner_of(target_memory& mem, target_addr lock, events::lock_kind kind)
{
    std::uint64_t offset = 0;
    switch (kind) {
    case events::lock_kind::mutex: offset = mutex_owner_offset; break;
    case events::lock_kind::rwlock: offset = rwlock_writer_offset; break;
    default: return std::nullopt;
    }
    std::int32_t owner = 0;
    if (lock.is_null() || !mem.read_value(target_addr{lock.value + offset}, owner))
        return std::nullopt;
    // A robust mutex whose owner died keeps FUTEX_OWNER_DIED (0x40000000) there.
    owner &= 0x3fffffff;
    if (owner <= 0)
        return std::nullopt;
    return static_cast<pid_t>(owner);
}

}  // namespace tdctl::core
