// Struct layouts published by a thread library as data: glibc exports, for
// each field its libthread_db needs, a symbol `_thread_db_<struct>_<field>`
// holding three uint32_t — size in bits, element count, byte offset — and
// `_thread_db_sizeof_<struct>` holding one uint32_t size in bytes. tdagent
// publishes the same format under its own prefix. Offsets are always read
// from the target, never compiled in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/types.hpp"
#include "core/target_access.hpp"

namespace tdctl::core {

/// One field descriptor: { bits, count, offset }.
struct db_field {
    std::uint32_t bits = 0;     ///< size of one element in bits (8 for bool, 64 for a pointer)
    std::uint32_t count = 0;    ///< number of elements (1 for scalars)
    std::uint32_t offset = 0;   ///< byte offset in the containing struct (0 for variables)

    bool is_valid() const { return bits != 0; }
    std::uint32_t element_bytes() const { return bits / 8; }
    std::uint32_t total_bytes() const { return bits / 8 * (count == 0 ? 1 : count); }
};

/// Reads `<prefix><name>` (e.g. prefix "_thread_db_", name "pthread_tid")
/// from module `module` of the target. std::nullopt when the symbol is missing
/// or unreadable.
std::optional<db_field> read_db_field(target_access& target, std::string_view module, std::string_view prefix,
                                      std::string_view name);

/// Reads a `_thread_db_sizeof_<name>` value (bytes).
std::optional<std::uint32_t> read_db_sizeof(target_access& target, std::string_view module, std::string_view prefix,
                                            std::string_view name);

/// Reads a little-endian unsigned integer of `bytes` (1, 2, 4 or 8) at addr.
std::optional<std::uint64_t> read_uint(target_memory& mem, target_addr addr, std::uint32_t bytes);

/// Writes the low `bytes` (1, 2, 4 or 8) of value at addr.
bool write_uint(target_memory& mem, target_addr addr, std::uint32_t bytes, std::uint64_t value);

}  // namespace tdctl::core
