// Helpers shared by the end-to-end tests: running the tdctl binary, picking
// its JSON Lines output apart, and reading the nptl state of a target
// straight from /proc (ELF symbols from `nm`, addresses from /proc/PID/maps),
// independently of tdctl's own code.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>
#include <thread_db.h>

#include <nlohmann/json.hpp>

#include "tests/support/support.hpp"

namespace tdctl::itest {

using json = nlohmann::json;
using tdctl::test::milliseconds;

/// One finished tdctl run: status, both outputs and, with --json, its records.
struct tdctl_run {
    tdctl::test::command_result result;
    std::vector<json> records;  ///< empty unless the run used --json

    /// Records whose "type" is type, in output order.
    std::vector<json> of_type(std::string_view type) const;
    /// "event" records for one event name ("TD_CREATE", "TD_DEATH").
    std::vector<json> events(std::string_view name) const;
    /// Command line, status, and both outputs (cut to a readable length).
    std::string describe() const;
};

/// Runs tdctl with args (tdctl_path() is prepended). Output lines are parsed
/// as JSON when args hold "--json"; a line that is not JSON fails the parse
/// (throws std::runtime_error naming the line).
tdctl_run run_tdctl(const std::vector<std::string>& args, milliseconds timeout = milliseconds{60000},
                    const tdctl::test::run_options& options = {});

/// Records of one type from JSON lines.
std::vector<json> records_of_type(const std::vector<json>& records, std::string_view type);
/// "event" records for one event name.
std::vector<json> event_records(const std::vector<json>& records, std::string_view name);
/// Every record parsed from text (JSON Lines); lines that are not JSON throw.
std::vector<json> parse_records(std::string_view text);

/// A "0x..." string of a record as a number; throws std::runtime_error when
/// the field is missing or not hex.
std::uint64_t hex_field(const json& record, const char* field);
/// An integer field; throws std::runtime_error when missing or not an integer.
std::int64_t int_field(const json& record, const char* field);

/// The "tid" of every record, as a multiset.
std::multiset<pid_t> tid_multiset(const std::vector<json>& records);
std::multiset<pid_t> to_multiset(const std::vector<pid_t>& tids);

/// Empty when equal; otherwise lists what only `expected` and only `actual`
/// hold (with multiplicities), for assertion messages.
std::string multiset_difference(const std::multiset<pid_t>& expected, const std::multiset<pid_t>& actual);

/// Events that lack a well-formed tid, handle, data or reporter, or whose
/// data is not their handle (TD_CREATE / TD_DEATH messages carry the thread
/// handle as data). Empty when all are fine; else a description.
std::string malformed_thread_events(const std::vector<json>& events);

/// Whether a JSON `frames` array (a stack of an event or of `bt`) has a
/// frame whose `function` is exactly `name`.
bool has_function(const json& frames, std::string_view name);

/// The path of a program found on PATH; nullopt when it is not installed.
std::optional<std::string> find_program(const std::string& name);

/// A shared object mapped in a target and its dynamic symbols (from nm -D of
/// the file on disk, or of another path with the same contents).
struct mapped_module {
    std::string mapped_path;            ///< as /proc/PID/maps shows it
    std::uint64_t base = 0;             ///< start of the mapping at file offset 0
    std::map<std::string, std::uint64_t> symbols;  ///< name (no version) -> file address

    /// base + the symbol's value; throws std::runtime_error when missing.
    std::uint64_t address_of(const std::string& name) const;
    bool has(const std::string& name) const { return symbols.contains(name); }
};

/// The module of pid whose mapped path has file name `file_name` (e.g.
/// "libc.so.6"); symbols are read from symbol_source, or from the mapped path
/// when that is empty. Throws std::runtime_error when it is not mapped.
mapped_module find_module(pid_t pid, std::string_view file_name, const std::string& symbol_source = {});

/// A glibc `_thread_db_*` descriptor: three uint32_t in target memory.
struct db_descriptor {
    std::uint32_t size_bits = 0;
    std::uint32_t count = 0;
    std::uint32_t offset = 0;
};
db_descriptor read_descriptor(pid_t pid, const mapped_module& libc, const std::string& name);

/// Named byte ranges of target memory, read through /proc/PID/mem.
struct memory_region {
    std::string name;
    std::uint64_t address = 0;
    std::size_t length = 0;
};

using memory_snapshot = std::map<std::string, std::vector<std::uint8_t>>;

memory_snapshot take_snapshot(pid_t pid, const std::vector<memory_region>& regions);
/// Empty when equal; else which regions differ and how (hex dumps).
std::string snapshot_difference(const memory_snapshot& before, const memory_snapshot& after);
std::string hex_bytes(const std::vector<std::uint8_t>& bytes);

/// The nptl state tdctl edits when it arms events: both reporting
/// addresses (text), the global mask, the message list head, ld.so's initial
/// report flag, and for each thread handle its report_events, eventbuf and
/// nextevent fields (offsets from the _thread_db_pthread_* descriptors).
std::vector<memory_region> nptl_regions(pid_t pid, const std::vector<std::uint64_t>& thread_handles,
                                        const std::string& libc_symbol_source = {});

/// Writes bytes into the target through /proc/PID/mem: the test's own edits,
/// past tdctl. Throws std::runtime_error on a failed or short write.
void write_proc_mem(pid_t pid, std::uint64_t address, const std::vector<std::uint8_t>& bytes);

/// Where the event state that detach must restore lives, from nm -D of libc
/// and its _thread_db_* descriptors (not from tdctl).
struct nptl_event_fields {
    std::uint64_t global_mask = 0;            ///< __nptl_threads_events (td_thr_events_t)
    std::uint32_t report_events_offset = 0;   ///< struct pthread: report_events
    std::size_t report_events_bytes = 0;
    std::uint32_t eventmask_offset = 0;       ///< struct pthread: eventbuf.eventmask (td_thr_events_t)
};
nptl_event_fields find_nptl_event_fields(pid_t pid, const std::string& libc_symbol_source = {});

/// A td_thr_events_t holding exactly these events, as raw bytes (glibc's bit
/// layout, from the <thread_db.h> macros).
std::vector<std::uint8_t> event_mask_bytes(std::initializer_list<td_event_e> events);

/// Event state written straight into the target, as a debugger that came
/// before tdctl may have left it (so that a detach that merely clears
/// everything is told apart from one that restores). Each write is read back;
/// a mismatch throws std::runtime_error.
void write_global_mask(pid_t pid, const nptl_event_fields& fields, std::initializer_list<td_event_e> events);
void write_thread_mask(pid_t pid, const nptl_event_fields& fields, std::uint64_t handle,
                       std::initializer_list<td_event_e> events);
void write_report_events(pid_t pid, const nptl_event_fields& fields, std::uint64_t handle, bool on);

/// Bytes of a file at an offset (for comparing mapped text with the file).
std::vector<std::uint8_t> read_file_bytes(const std::string& path, std::uint64_t offset, std::size_t length);

/// The file offset behind a target address, from /proc/PID/maps.
std::optional<std::uint64_t> file_offset_of(pid_t pid, std::uint64_t address);

/// A PID that names no process right now (below pid_max).
pid_t unused_pid();

/// A kernel thread's PID (PF_KTHREAD in /proc/PID/stat), if one is visible.
std::optional<pid_t> kernel_thread_pid();

/// Whether tdctl may attach to a child of this test process: nullopt when
/// yes, else the reason (from tdctl's own refusal). Probed once.
std::optional<std::string> attach_unavailable_reason();
/// skip_test unless ptrace works and tdctl can attach to our children.
void require_attach();

/// For a fixture started with --wait-start whose "ready PID" line was
/// read: starts `tdctl --json -p PID -e watch`, waits for its `attached`
/// record and until libc's __nptl_create_event holds the breakpoint (no
/// creation can be missed from there), then sends the fixture its go byte.
/// Returns the running tdctl.
tdctl::test::child_process watch_then_go(tdctl::test::child_process& target);

/// Starts fixture name with args and waits until its record holds "done".
/// The record file must be passed in args via --record.
tdctl::test::child_process start_fixture(const std::string& name, const std::vector<std::string>& args,
                                         const std::string& record_path,
                                         const tdctl::test::spawn_options& options = {});

/// Whether `part` occurs in `text`.
inline bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

/// A sleeper fixture with one worker (two threads), started and running
/// (its record says `done`).
struct sleeper_target {
    tdctl::test::temp_file record{"sleeper-record"};
    tdctl::test::child_process process;
    sleeper_target() : process(start_fixture("sleeper", {"--record", record.path(), "1"}, record.path())) {}
    pid_t pid() const { return process.pid(); }
    std::string pid_text() const { return std::to_string(process.pid()); }
};

/// One thread the steer fixture created, from its `spawn` answer
/// ("thread <index> <tid> <pthread_t>").
struct steer_thread {
    int index = -1;
    pid_t tid = 0;
    std::uint64_t handle = 0;
};
/// Asks steer to `spawn` a thread; throws std::runtime_error when the answer
/// is anything else.
steer_thread steer_spawn(tdctl::test::child_process& steer, milliseconds timeout = milliseconds{10000});

/// All TIDs of pid alive now, as a set.
std::set<pid_t> live_tids(pid_t pid);

/// The state letter of every task of pid (TID -> state).
std::map<pid_t, char> task_states(pid_t pid);

/// Tasks of pid still traced (TracerPid != 0) or in one of `states` (e.g.
/// "t": a tracing stop; "tT": also a group stop a tracer that went away
/// left), one "TID: tracer N state S" line each; empty when none is.
std::string traced_tasks(pid_t pid, std::string_view states);

}  // namespace tdctl::itest
