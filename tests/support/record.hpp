// The record file a fixture writes with --record (tests/fixtures/README.md):
// one fact per line, "kind field...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "tests/support/child_process.hpp"

namespace tdctl::test {

/// One line of a record. Kinds and their fields:
///   start <pid> | thread <tid> <pthread_t> <label> | exit <tid>
///   signal-sent <tid> <signo> | signal-got <tid> <signo>
///   fork <pid> | child-exit <pid> <wait status> | opened | mutex <address> | done
/// A thread's label is the rest of its line and may contain spaces.
struct record_fact {
    std::string kind;
    std::vector<std::string> fields;
    std::size_t line_number = 0;  ///< 1-based, for messages
    std::string line;

    /// Field i as an integer (decimal, or hex with 0x); throws std::runtime_error
    /// showing the line when it is missing or not a number.
    std::int64_t number(std::size_t i) const;
    /// The first field: the TID or PID every kind but "done" starts with.
    pid_t id() const { return static_cast<pid_t>(number(0)); }
    /// For "thread": the pthread_t value (the thread handle for glibc).
    std::uint64_t handle() const { return static_cast<std::uint64_t>(number(1)); }
    /// For "thread": the label.
    const std::string& label() const;
};

/// Parses record text. A last line without its newline (a fixture still
/// writing) is ignored; a malformed line throws std::runtime_error showing it.
std::vector<record_fact> parse_record(std::string_view text);

/// Reads and parses a record file; throws std::runtime_error if it cannot be read.
std::vector<record_fact> read_record(const std::string& path);

std::size_t count_kind(const std::vector<record_fact>& facts, std::string_view kind);
std::vector<record_fact> facts_of_kind(const std::vector<record_fact>& facts, std::string_view kind);

/// TIDs of the "thread" facts, in record order; only those with the given
/// label when it is not empty.
std::vector<pid_t> thread_tids(const std::vector<record_fact>& facts, std::string_view label = {});

/// Polls the record until it holds at least min_count facts of kind and
/// returns all its facts. Throws std::runtime_error showing the record when
/// timeout passes first (a missing file counts as an empty record).
std::vector<record_fact> wait_for_fact(const std::string& path, std::string_view kind, std::size_t min_count,
                                       milliseconds timeout);

/// The whole record as text, for assertion messages (at most max_lines lines).
std::string format_record(const std::vector<record_fact>& facts, std::size_t max_lines = 40);

}  // namespace tdctl::test
