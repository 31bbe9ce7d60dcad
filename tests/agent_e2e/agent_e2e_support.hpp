// What the agent end-to-end tests share: where their fixtures and the agent
// are, a `tdctl --agent --json` run split into its records, the fixtures'
// own record of the events they raise (fixtures/agent_fixture.h), and the
// comparison of the two.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "tests/support/child_process.hpp"

namespace tdctl::agent_e2e {

using namespace std::chrono_literals;

/// The absolute path of fixture `name` of this folder (built into
/// ${PROJECT_BINARY_DIR}/tests/agent_e2e/fixtures).
std::string fixture_path(std::string_view name);
/// ${PROJECT_BINARY_DIR}/agent/libtdagent.so.
std::string agent_library();
/// The first executable `name` on PATH, or nullopt.
std::optional<std::string> find_on_path(std::string_view name);

/// One event as the record or tdctl states it, in the record's terms:
/// data is "0x<hex>" (lowercase, no leading zeros) or "@<tid>" (the handle
/// of thread tid).
struct event_fact {
    std::string event;   ///< "TD_LOCK_TRY"
    pid_t reporter = 0;  ///< the LWP that raised it
    std::string data;

    std::string text() const;   ///< "TD_LOCK_TRY 1234 0x55..."
    auto operator<=>(const event_fact&) const = default;
};

/// A fixture's record file: the events it expects, its threads, whether it
/// reached "done".
struct fixture_record {
    std::vector<event_fact> events;            ///< in record order
    std::map<pid_t, std::string> threads;      ///< "thread" lines: tid -> label
    std::vector<std::string> lines;            ///< every complete line
    bool done = false;
    pid_t pid = 0;                             ///< from "start"

    std::size_t count(std::string_view event) const;
};

/// Parses a record written by the fixtures of this folder. A last line
/// without its newline is ignored; an unknown or malformed line throws
/// std::runtime_error showing it.
fixture_record read_fixture_record(const std::string& path);

/// One "type":"event" record of tdctl --json.
struct observed_event {
    std::string event;
    pid_t tid = 0;          ///< the thread the message is about
    pid_t reporter = 0;     ///< the LWP that hit the reporting address
    std::uint64_t handle = 0;
    std::uint64_t data = 0;
    std::string name;
    std::string origin;     ///< "" or e.g. "lwp-exit"
    nlohmann::json raw;
};

/// A finished `tdctl` run, its JSON Lines split up.
struct tdctl_run {
    test::command_result result;
    std::vector<nlohmann::json> records;
    std::vector<observed_event> events;
    std::optional<nlohmann::json> launched;    ///< the "launched" record
    std::optional<nlohmann::json> exit;        ///< the "exit" record
    std::optional<nlohmann::json> watch_end;   ///< the last "watch_end" record

    /// Records of one type, in order.
    std::vector<nlohmann::json> of_type(std::string_view type) const;
    std::size_t count(std::string_view event) const;
    /// TD_CREATE and TD_DEATH messages per thread (their `tid`).
    std::pair<std::map<pid_t, int>, std::map<pid_t, int>> creates_and_deaths() const;
};

/// Runs `tdctl --agent --json <commands as -e ...> -- argv` to completion
/// (bounded by timeout; a hang throws std::runtime_error with the output).
tdctl_run run_tdctl_agent(const std::vector<std::string>& commands, const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = 60s,
                          const std::vector<std::string>& extra_options = {});

/// Runs `tdctl -p PID --agent --json <commands as -e ...>` to completion
/// (bounded by timeout, as run_tdctl_agent): the agent is loaded by attach.
tdctl_run run_tdctl_agent_attached(const std::vector<std::string>& commands, pid_t pid,
                                   std::chrono::milliseconds timeout = 60s);

/// tdctl's events in the record's terms. Walks them in output order: a
/// TD_CREATE makes its data the handle of its tid (from then on: handles are
/// reused after a reap); any data equal to a current handle becomes "@tid".
std::vector<event_fact> as_facts(const std::vector<observed_event>& events);

/// Expected (the record) against observed (tdctl), as multisets and as the
/// order of each reporter's own events.
struct comparison {
    std::vector<event_fact> missing;      ///< recorded, not reported
    std::vector<event_fact> unexpected;   ///< reported, not recorded
    /// reporter -> (recorded sequence, reported sequence) where they differ.
    std::map<pid_t, std::pair<std::vector<std::string>, std::vector<std::string>>> order;

    bool same_multiset() const { return missing.empty() && unexpected.empty(); }
    bool same_order() const { return order.empty(); }
    std::string describe() const;
};
comparison compare(const std::vector<event_fact>& expected, const std::vector<event_fact>& observed);

/// The run in a few lines, for assertion messages: command, status, stderr,
/// and the records (at most max_lines: the first and the last half of them).
std::string describe_run(const tdctl_run& run, std::size_t max_lines = 80);

/// "0x<hex>" of a value, lowercase, no leading zeros ("0x0" for 0).
std::string hex(std::uint64_t v);
/// Parses "0x..." (or decimal); throws std::runtime_error when not a number.
std::uint64_t parse_number(std::string_view text);

}  // namespace tdctl::agent_e2e
