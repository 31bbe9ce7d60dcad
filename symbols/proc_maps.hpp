// /proc/PID/maps, parsed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace tdctl::symbols {

/// One line of /proc/PID/maps.
struct map_entry {
    std::uint64_t start = 0;    ///< first byte, target address
    std::uint64_t end = 0;      ///< one past the last byte
    bool readable = false, writable = false, executable = false, shared = false;
    std::uint64_t offset = 0;   ///< file offset of `start`, bytes
    unsigned dev_major = 0, dev_minor = 0;
    std::uint64_t inode = 0;
    /// As printed, without the " (deleted)" the kernel appends to a deleted
    /// file's name; may be empty or "[heap]" etc.
    std::string path;
    bool deleted = false;       ///< the kernel appended " (deleted)"

    bool is_file_backed() const { return inode != 0 && !path.empty() && path.front() == '/'; }
};

/// Which lines of a maps file to keep: all, or only the file-backed ones
/// (map_entry::is_file_backed(); a line without a '/' is passed over
/// unparsed: a process's thread stacks are two anonymous lines each).
enum class maps_lines { all, file_backed };

/// Parses the text of a maps file. Malformed lines are skipped. Paths may
/// contain spaces. Text alone cannot tell the kernel's " (deleted)" from a
/// file named so: a path ending that way is taken as deleted (read_maps
/// asks the file system).
std::vector<map_entry> parse_maps(std::string_view text, maps_lines which = maps_lines::all);

/// Reads and parses /proc/PID/maps. A path ending in " (deleted)" is a
/// deleted file's unless the whole path, as process pid sees it
/// (/proc/PID/root, else our own root), is the mapped file (its inode): a
/// file whose name ends that way. Throws tdctl::error (os) if the maps
/// cannot be read.
std::vector<map_entry> read_maps(pid_t pid, maps_lines which = maps_lines::all);

/// A path the kernel printed for process pid (a maps line, the
/// /proc/PID/exe link), with " (deleted)" at its end taken off when it is
/// the kernel's mark of a deleted file, as read_maps() decides it: kept when
/// `printed` itself names the file with `inode`.
struct printed_path {
    std::string path;
    bool deleted = false;
};
printed_path unmark_deleted(pid_t pid, std::string_view printed, std::uint64_t inode);

}  // namespace tdctl::symbols
