// What tdctl may change in a target attached with --agent, read through
// /proc/PID/mem independently of tdctl, and the entries of tdctl's change
// journal (its TDCTL_DEBUG lines) matched against it: for tests that check
// that a detach leaves every byte as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <sys/types.h>

namespace tdctl::agent_e2e {

/// One range of target memory and the bytes it held.
struct memory_span {
    std::string what;
    std::uint64_t address = 0;
    std::vector<std::uint8_t> bytes;
    /// A GOT slot: what the dynamic loader binds it to (libc's definition of
    /// the symbol at the slot's version), so that a lazy slot the program
    /// bound after the detach, by its first call, is told apart; else 0.
    std::uint64_t loader_binding = 0;
};

/// Everything tdctl may change while attached with --agent: the GOT slots of
/// the functions the agent wraps (core::agent_wrapped_functions) in every
/// module; once the agent is loaded, its reporting functions (16 bytes
/// each), global mask (__tdagent_threads_events), unknown-thread record,
/// and for every record on __tdagent_thread_list its report_events flag and
/// event mask (offsets from the agent's _tdagent_db_* descriptors). Fails
/// the test (REQUIRE) when libc or an agent symbol cannot be found.
std::vector<memory_span> snapshot(pid_t pid);

/// Bytes as lowercase hex, for messages.
std::string bytes_hex(const std::vector<std::uint8_t>& bytes);

/// Spans present in both snapshots whose bytes differ, one line each (empty
/// when none), but for a lazy GOT slot the program bound meanwhile (counted
/// in `bound`); `only_one` says how many spans only one of them has
/// (records of threads born or ended meanwhile, the agent's when it was
/// loaded in between).
std::string differences(const std::vector<memory_span>& before, const std::vector<memory_span>& after,
                        std::size_t& only_one, std::size_t& bound);

/// One change tdctl's journal recorded (its TDCTL_DEBUG line).
struct journal_entry {
    std::string kind;        ///< change_kind_name(): "GOT entry", "thread enable flag", …
    std::uint64_t address = 0;
    std::size_t length = 0;  ///< bytes
};

/// The journal's "journal: KIND N bytes at 0xADDR" lines in tdctl's stderr.
std::vector<journal_entry> journal_entries(const std::string& debug_text);

/// Journal entries that were not compared and are not accounted for (one
/// line each; empty when none). Every entry must lie in a span of the
/// `compared` snapshots (taken before and after a session), or be injected
/// bytes now unmapped (the loader's pages) or a return slot (8 bytes on the
/// hijacked thread's stack, put back as each call returned), or belong to
/// the record of a thread that ended meanwhile: off the live list now
/// (`live`, a snapshot taken after the others). A record on it again
/// belongs to a thread born since and must hold what a new record holds,
/// zeros. `kinds` counts the entries by kind, and those records apart.
std::string uncovered(pid_t pid, const std::vector<journal_entry>& entries,
                      const std::vector<const std::vector<memory_span>*>& compared,
                      const std::vector<memory_span>& live, std::map<std::string, int>& kinds);

}  // namespace tdctl::agent_e2e
