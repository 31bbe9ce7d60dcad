// Records made from a core::window_usage: `top`'s rows for one interval
// (ordered by a column, cut to a limit, under a process line) and the
// on-CPU / run-queue / off-CPU split at the end of `watch` and `sleep`.
// Plain functions of their input, unit-tested on canned windows.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmd/records.hpp"
#include "core/accounting/usage_window.hpp"

namespace tdctl::cmd {

/// A column `top --sort` orders by: `cpu` is %usr+%sys. Numbers sort
/// highest first, `tid` and `name` lowest first.
enum class top_column { cpu, usr, sys, wait, off, cswch, nvcswch, minflt, majflt, tid, name };

/// The column a word names, or nullopt.
std::optional<top_column> parse_top_column(std::string_view word);

/// Every word parse_top_column() takes, for messages.
inline constexpr std::string_view top_column_words = "cpu, usr, sys, wait, off, cswch, nvcswch, minflt, majflt, tid, name";

/// How `top` shows an interval.
struct top_view {
    pid_t pid = 0;
    std::string name;                   ///< the process's name, for the process line
    top_column order = top_column::cpu;
    std::optional<long long> limit;     ///< at most this many thread rows
};

/// One interval of `top`: the process line (the process as one process, as
/// top_process_record says) and the rows shown.
struct top_interval {
    top_process_record process;
    std::vector<top_record> rows;
};

/// The interval `w` as `view` shows it; `time`: when it ended (seconds since tdctl started).
top_interval top_table(const core::window_usage& w, const top_view& view, double time);

/// The split at the end of `command` ("watch", "sleep"): a row per thread,
/// most time runnable (on CPU + waiting) first, at most `max_rows`; the
/// threads beyond summed in one folded row.
std::vector<time_split_record> time_split_rows(const core::window_usage& w, const std::string& command, pid_t pid,
                                               double time, std::size_t max_rows);

}  // namespace tdctl::cmd
