// Skipping a test the machine cannot run: exit status 77, which CTest counts
// as skipped (SKIP_RETURN_CODE in tests/tdctl_test.cmake).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tdctl::test {

inline constexpr int skip_exit_code = 77;

/// Prints "SKIPPED: reason" and exits the test program with 77. Call it
/// before starting processes: destructors of live objects do not run.
[[noreturn]] void skip_test(std::string_view reason);

/// Why this process cannot ptrace a child of its own (seccomp, Yama
/// ptrace_scope 3, ...), or nullopt when it can. Probed once, then cached.
std::optional<std::string> ptrace_unavailable_reason();

/// skip_test unless ptrace works here.
void require_ptrace();

}  // namespace tdctl::test
