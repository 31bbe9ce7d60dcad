// Strong types used at every layer boundary: addresses in the target versus
// addresses in an ELF file, and Linux task ids.
#pragma once

#include <cstdint>
#include <functional>
#include <sys/types.h>

#include <fmt/format.h>

namespace tdctl {

/// A virtual address in the target process (after load bias).
struct target_addr {
    std::uint64_t value = 0;

    constexpr target_addr() = default;
    constexpr explicit target_addr(std::uint64_t v) : value(v) {}

    constexpr target_addr operator+(std::int64_t off) const { return target_addr{value + static_cast<std::uint64_t>(off)}; }
    constexpr target_addr operator-(std::int64_t off) const { return target_addr{value - static_cast<std::uint64_t>(off)}; }
    constexpr std::int64_t operator-(target_addr other) const { return static_cast<std::int64_t>(value - other.value); }
    constexpr auto operator<=>(const target_addr&) const = default;
    constexpr bool is_null() const { return value == 0; }
};

/// An address as written in an ELF file (st_value, p_vaddr), before load bias.
struct file_addr {
    std::uint64_t value = 0;

    constexpr file_addr() = default;
    constexpr explicit file_addr(std::uint64_t v) : value(v) {}
    constexpr auto operator<=>(const file_addr&) const = default;
};

/// A Linux task id (the LWP id); the thread-group leader's TID is the PID.
struct tid_t {
    pid_t value = 0;

    constexpr tid_t() = default;
    constexpr explicit tid_t(pid_t v) : value(v) {}
    constexpr auto operator<=>(const tid_t&) const = default;
};

}  // namespace tdctl

template <>
struct std::hash<tdctl::target_addr> {
    std::size_t operator()(tdctl::target_addr a) const noexcept { return std::hash<std::uint64_t>{}(a.value); }
};
template <>
struct std::hash<tdctl::tid_t> {
    std::size_t operator()(tdctl::tid_t t) const noexcept { return std::hash<pid_t>{}(t.value); }
};

/// Formats as lowercase hex with a 0x prefix and no padding, like %p.
template <>
struct fmt::formatter<tdctl::target_addr> : fmt::formatter<std::string_view> {
    template <typename Ctx>
    auto format(tdctl::target_addr a, Ctx& ctx) const {
        return fmt::format_to(ctx.out(), "{:#x}", a.value);
    }
};
template <>
struct fmt::formatter<tdctl::file_addr> : fmt::formatter<std::string_view> {
    template <typename Ctx>
    auto format(tdctl::file_addr a, Ctx& ctx) const {
        return fmt::format_to(ctx.out(), "{:#x}", a.value);
    }
};
template <>
struct fmt::formatter<tdctl::tid_t> : fmt::formatter<std::string_view> {
    template <typename Ctx>
    auto format(tdctl::tid_t t, Ctx& ctx) const {
        return fmt::format_to(ctx.out(), "{}", t.value);
    }
};
