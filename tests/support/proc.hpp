// Reading /proc for tests: the kernel's view of a target, to compare with
// what tdctl and the fixture report. Nothing here uses ptrace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace tdctl::test {

/// TIDs listed in /proc/PID/task, ascending; empty when the process is gone.
std::vector<pid_t> task_tids(pid_t pid);

/// TracerPid from /proc/PID/status: 0 when not traced; nullopt when the
/// process is gone.
std::optional<pid_t> tracer_pid(pid_t pid);

/// The state letter of /proc/PID/stat ('R', 'S', 'D', 'T' stopped, 't'
/// tracing stop, 'Z', ...); nullopt when the process is gone.
std::optional<char> proc_state(pid_t pid);
/// The same for one task, from /proc/PID/task/TID/stat.
std::optional<char> task_state(pid_t pid, pid_t tid);

/// The thread name from /proc/PID/task/TID/comm, without the newline.
std::optional<std::string> task_comm(pid_t pid, pid_t tid);

/// The state letter of a stat line. The comm field may hold spaces and ')',
/// so the state is found after the last ')'. nullopt if the line is malformed.
std::optional<char> parse_stat_state(std::string_view stat_line);

/// Reads len bytes at addr through /proc/PID/mem (pread). The result is
/// shorter when the range runs into unmapped memory. Throws tdctl::error with
/// the errno when /proc/PID/mem cannot be opened (no such process, EACCES).
std::vector<std::uint8_t> read_proc_mem(pid_t pid, std::uint64_t addr, std::size_t len);

/// One line of /proc/PID/maps.
struct mapping {
    std::uint64_t start = 0;
    std::uint64_t end = 0;
    std::string perms;   ///< "r-xp" etc.
    std::uint64_t offset = 0;
    std::string path;    ///< empty for anonymous memory; "[stack]", "[heap]", ...
};

/// Parses /proc/PID/maps; empty when the process is gone.
std::vector<mapping> proc_maps(pid_t pid);
/// Parses the text of a maps file; throws std::runtime_error on a bad line.
std::vector<mapping> parse_maps(std::string_view text);

/// The whole text of a file, or nullopt when it cannot be opened.
std::optional<std::string> read_text_file(const std::string& path);

}  // namespace tdctl::test
