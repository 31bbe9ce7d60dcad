// A real-world target launched under tdctl: CPython starting and joining
// threading.Thread objects. The script writes the native TIDs its threads
// had; tdctl must report exactly those, once created and once dead.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

// argv[1]: where to write the TIDs; argv[2]: how many threads.
constexpr const char* python_script = R"(import sys, threading
ids = []
lock = threading.Lock()
def work():
    with lock:
        ids.append(threading.get_native_id())
threads = [threading.Thread(target=work) for _ in range(int(sys.argv[2]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(sys.argv[1], "w") as f:
    f.write(" ".join(str(i) for i in ids) + "\n")
)";

// Daemon threads still blocked when the interpreter exits: exit_group kills
// them, so they never reach glibc's death report. argv as above.
constexpr const char* python_daemons_script = R"(import sys, threading, time
ids = []
lock = threading.Lock()
def work():
    with lock:
        ids.append(threading.get_native_id())
    time.sleep(1000)
for _ in range(int(sys.argv[2])):
    threading.Thread(target=work, daemon=True).start()
while True:
    with lock:
        if len(ids) == int(sys.argv[2]):
            break
    time.sleep(0.005)
with open(sys.argv[1], "w") as f:
    f.write(" ".join(str(i) for i in ids) + "\n")
)";

/// The python3 interpreter binary itself (not a wrapper script such as a
/// pyenv shim, whose forks and execs would be beside the point here).
std::optional<std::string> python_binary()
{
    auto python = find_program("python3");
    if (!python)
        return std::nullopt;
    auto r = run_command({*python, "-c", "import sys; print(sys.executable)"}, 30s);
    if (!r.status.is_success())
        return std::nullopt;
    std::string path = r.out.substr(0, r.out.find('\n'));
    auto magic = read_file_bytes(path, 0, 4);
    if (magic != std::vector<std::uint8_t>{0x7f, 'E', 'L', 'F'})
        return std::nullopt;
    return path;
}

struct python_run {
    tdctl_run run;
    std::vector<pid_t> native_ids;
    bool ids_written = false;
};

python_run run_python_under_tdctl(const std::string& python, int threads, const char* script = python_script)
{
    temp_file ids("python-native-ids");
    python_run out{run_tdctl({"--json", "--", python, "-c", script, ids.path(), std::to_string(threads)}, 60s),
                   {},
                   false};
    if (auto text = read_text_file(ids.path())) {
        out.ids_written = true;
        std::istringstream in(*text);
        for (pid_t tid; in >> tid;)
            out.native_ids.push_back(tid);
    }
    return out;
}

void check_python_run(const python_run& p, int threads)
{
    INFO(p.run.describe());
    CHECK(p.run.result.status.is_exited());
    CHECK(p.run.result.status.exit_code() == 0);
    REQUIRE(p.ids_written);
    REQUIRE(p.native_ids.size() == static_cast<std::size_t>(threads));

    auto creates = p.run.events("TD_CREATE");
    auto deaths = p.run.events("TD_DEATH");
    CHECK(creates.size() == static_cast<std::size_t>(threads));
    CHECK(deaths.size() == static_cast<std::size_t>(threads));
    auto expected = to_multiset(p.native_ids);
    auto diff_create = multiset_difference(expected, tid_multiset(creates));
    CHECK_MESSAGE(diff_create.empty(), "TD_CREATE vs threading.get_native_id(): " << diff_create);
    auto diff_death = multiset_difference(expected, tid_multiset(deaths));
    CHECK_MESSAGE(diff_death.empty(), "TD_DEATH vs threading.get_native_id(): " << diff_death);
    auto bad = malformed_thread_events(creates) + malformed_thread_events(deaths);
    CHECK_MESSAGE(bad.empty(), bad);

    // A TD_DEATH for a thread must name the handle its TD_CREATE named.
    std::map<pid_t, std::uint64_t> handle_of;
    for (const auto& c : creates)
        handle_of[static_cast<pid_t>(int_field(c, "tid"))] = hex_field(c, "handle");
    for (const auto& d : deaths) {
        auto it = handle_of.find(static_cast<pid_t>(int_field(d, "tid")));
        if (it != handle_of.end())
            CHECK_MESSAGE(it->second == hex_field(d, "handle"), d.dump());
    }

    auto exits = p.run.of_type("exit");
    REQUIRE(exits.size() == 1);
    CHECK(int_field(exits[0], "status") == 0);
}

}  // namespace

TEST_SUITE("python")
{
    TEST_CASE("python3 with 20 threading.Thread: 20 TD_CREATE and 20 TD_DEATH, each a TID python had")
    {
        require_ptrace();
        auto python = python_binary();
        if (!python)
            skip_test("python3 (an ELF interpreter binary) is not installed");
        check_python_run(run_python_under_tdctl(*python, 20), 20);
    }

    TEST_CASE("python3 runs repeated, four at once: no message lost under load")
    {
        require_ptrace();
        auto python = python_binary();
        if (!python)
            skip_test("python3 (an ELF interpreter binary) is not installed");
        constexpr int rounds = 3;
        constexpr int parallel = 4;
        for (int round = 0; round < rounds; ++round) {
            std::vector<std::optional<python_run>> results(parallel);
            std::vector<std::string> failures(parallel);
            {
                std::vector<std::jthread> workers;
                for (int i = 0; i < parallel; ++i)
                    workers.emplace_back([&, i] {
                        try {
                            results[i] = run_python_under_tdctl(*python, 20);
                        } catch (const std::exception& e) {
                            failures[i] = e.what();
                        }
                    });
            }
            for (int i = 0; i < parallel; ++i) {
                CAPTURE(round);
                CAPTURE(i);
                REQUIRE_MESSAGE(failures[i].empty(), failures[i]);
                REQUIRE(results[i].has_value());
                check_python_run(*results[i], 20);
            }
        }
    }

    TEST_CASE("python3 daemon threads killed at exit: each still gets one TD_DEATH (seen at its LWP exit)")
    {
        require_ptrace();
        auto python = python_binary();
        if (!python)
            skip_test("python3 (an ELF interpreter binary) is not installed");
        auto p = run_python_under_tdctl(*python, 10, python_daemons_script);
        check_python_run(p, 10);
        // None of them passed glibc's report: they were killed in time.sleep.
        for (const auto& d : p.run.events("TD_DEATH"))
            CHECK_MESSAGE(d.value("origin", "") == "lwp-exit", d.dump());
    }
}
