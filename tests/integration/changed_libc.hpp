// A target whose libc was replaced or deleted on disk after it was mapped
// (acceptance 8: "events still work, or a clear refusal — never a
// breakpoint at a wrong address"), and the check of one tdctl session on it.
// steer runs on a private copy of the system libc (LD_LIBRARY_PATH); the
// copy is then deleted, or another file is renamed over it as a package
// upgrade does. /proc/PID/maps then says "(deleted)", and only
// /proc/PID/map_files/ still opens what is mapped, which needs
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tests/integration/integration_support.hpp"

namespace tdctl::itest {

/// A directory removed with everything in it when the owner goes away.
class temp_dir {
public:
    explicit temp_dir(std::string_view stem);
    ~temp_dir();
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    const std::string& path() const { return name_.path(); }

private:
    tdctl::test::temp_file name_;
};

enum class libc_change { replaced, deleted };

class changed_libc_target {
public:
    /// Starts steer on a copy of the system libc and changes the copy on
    /// disk; REQUIREs that maps shows the mapping "(deleted)".
    explicit changed_libc_target(libc_change how);

    pid_t pid() const { return steer_.pid(); }
    tdctl::test::child_process& steer() { return steer_; }
    /// libc as mapped, with the symbols of the system libc (the same bytes).
    const mapped_module& libc() const { return libc_; }
    /// /proc/PID/map_files/START-END of libc's mapping at file offset 0.
    const std::string& map_files_path() const { return map_files_path_; }
    /// Whether this test process can open map_files_path().
    bool map_files_readable() const;
    /// The 16 bytes at __nptl_create_event / __nptl_death_event before any tdctl run.
    const std::vector<std::uint8_t>& create_text() const { return create_text_; }
    const std::vector<std::uint8_t>& death_text() const { return death_text_; }

private:
    temp_dir dir_;
    tdctl::test::temp_file record_;
    tdctl::test::child_process steer_;
    mapped_module libc_;
    std::string map_files_path_;
    std::vector<std::uint8_t> create_text_;
    std::vector<std::uint8_t> death_text_;
};

/// Runs `prefix... tdctl --json -p PID -e threads -e 'watch create,death
/// --count 2 --for 20'` on the target while steer starts and ends one
/// thread, and checks the outcome (doctest assertions): `threads` lists
/// /proc/PID/task, and
///   events work: exit 0, exactly one TD_CREATE and one TD_DEATH, both about
///   that thread (TID and handle from steer), the watch ended by its count; or,
///   only when refusal_allowed, a refusal: exit 2, nothing planted, and an
///   error record whose message names the reason (map_files and the
///   capability it needs).
/// Either way the target is left untraced, its text as before, and it runs
/// on: it answers and starts and ends a thread.
void check_session_on_changed_libc(changed_libc_target& target, const std::vector<std::string>& prefix,
                                   bool refusal_allowed);

}  // namespace tdctl::itest
