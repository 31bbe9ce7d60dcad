// A target made of memory only, laid out like glibc's thread records (the
// offsets are chosen here and handed to core as a protocol_layout, as
// libthread_db's descriptors hand glibc's): what the core unit tests build
// their thread lists, message lists and masks in.
//
// Record n sits at record(n); its fields:
//   +0 tid (32)   +4 cancelhandling (32)   +8 report_events (8)
//   +16 event mask (2x32)   +24 eventnum (32)   +32 eventdata (64)
//   +40 nextevent (64)      +48 list link (list_t: next, prev)
// __nptl_last_event is at last_event_var, __nptl_threads_events at
// global_mask_var.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/target_access.hpp"
#include "core/protocol/event_protocol.hpp"
#include "tests/support/image_memory.hpp"

namespace tdctl::test {

constexpr std::uint64_t record_size = 0x100;
constexpr target_addr last_event_var{0x100000};
constexpr target_addr global_mask_var{0x100010};

/// The address of record n (n ≥ 0).
constexpr target_addr record_at(int n)
{
    return target_addr{0x101000 + static_cast<std::uint64_t>(n) * record_size};
}

/// The layout above, for the nptl backend; thread_list_heads is left empty.
inline core::protocol_layout nptl_image_layout()
{
    core::protocol_layout layout;
    layout.backend = "nptl";
    layout.tid = {32, 1, 0};
    layout.cancelhandling = {32, 1, 4};
    layout.report_events = {8, 1, 8};
    layout.eventmask = {64, 1, 16};
    layout.eventnum = {32, 1, 24};
    layout.eventdata = {64, 1, 32};
    layout.nextevent = {64, 1, 40};
    layout.list_link = {128, 1, 48};
    layout.list_next = {64, 1, 0};
    layout.last_event = last_event_var;
    layout.global_mask = global_mask_var;
    return layout;
}

/// A target that is its memory image: no symbols, no modules, no LWPs and
/// no thread pointers unless a test's subclass says otherwise.
template <typename Access = core::target_access>
class memory_target : public Access {
public:
    image_memory mem;
    explicit memory_target(pid_t pid = 1) : pid_(pid) {}
    pid_t pid() const override { return pid_; }
    target_memory& memory() override { return mem; }
    std::optional<symbols::symbol> lookup_symbol(std::string_view, std::string_view) override { return std::nullopt; }
    bool has_module(std::string_view) override { return false; }
    std::vector<tid_t> lwps() override { return {}; }
    std::optional<target_addr> thread_pointer(tid_t) override { return std::nullopt; }

private:
    pid_t pid_;
};

}  // namespace tdctl::test
