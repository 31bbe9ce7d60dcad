// Stacks at event reporting addresses (issue 11): `bt` of a thread held by
// `stop` at a reporting site, and `watch --bt`, on the churn fixture (whose
// threads are created by fx_create), with the agent, and on python3 and
// node. Also what the event lines add: the new thread's start routine at
// TD_CREATE, the lifetime at TD_DEATH.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> functions_of(const json& frames)
{
    std::vector<std::string> names;
    for (const auto& f : frames)
        names.push_back(f["function"].is_string() ? f["function"].get<std::string>() : std::string("??"));
    return names;
}

// Index of the first frame at or after `from` named `name`, or -1.
int find_function(const json& frames, std::string_view name, std::size_t from = 0)
{
    for (std::size_t i = from; i < frames.size(); ++i)
        if (frames[i]["function"].is_string() && frames[i]["function"].get<std::string>() == name)
            return static_cast<int>(i);
    return -1;
}

// The stack `bt all` printed for the LWP the last `stopped` record names.
json reporter_stack(const tdctl_run& run, std::string_view event)
{
    auto stopped = run.of_type("stopped");
    REQUIRE_MESSAGE(!stopped.empty(), run.describe());
    REQUIRE(stopped.back()["event"] == event);
    auto tid = int_field(stopped.back(), "tid");
    for (const auto& bt : run.of_type("backtrace"))
        if (int_field(bt, "tid") == tid)
            return bt["frames"];
    FAIL("no backtrace of the stopped LWP ", tid);
    return json::array();
}

// A launch held at `stop EVENT`, then `bt all`, then on to the end.
std::vector<std::string> stop_then_bt(const std::string& event)
{
    return {"--json", "-e", "event set " + event, "-e", "event enable on all", "-e",
            "stop " + event + " --for 30", "-e", "bt all", "-e", "continue"};
}

std::vector<std::string> with_program(std::vector<std::string> args, const std::vector<std::string>& program)
{
    args.push_back("--");
    args.insert(args.end(), program.begin(), program.end());
    return args;
}

// The python3 interpreter binary itself (not a pyenv shim script).
std::optional<std::string> python_binary()
{
    auto python = find_program("python3");
    if (!python)
        return std::nullopt;
    auto r = run_command({*python, "-c", "import sys; print(sys.executable)"}, 30s);
    if (!r.status.is_success())
        return std::nullopt;
    return r.out.substr(0, r.out.find('\n'));
}

constexpr const char* python_threads = "import threading\n"
                                       "t = threading.Thread(target=lambda: None)\n"
                                       "t.start()\n"
                                       "t.join()\n";

// Frame 0 the reporting function, frame 1 pthread_create, frame 2 the
// program's own code (a named function outside libc).
void check_create_stack(const json& frames)
{
    INFO(frames.dump());
    REQUIRE(frames.size() >= 3);
    CHECK(frames[0]["function"] == "__nptl_create_event");
    CHECK(frames[0]["module"].get<std::string>().starts_with("libc.so"));
    CHECK(frames[1]["function"] == "pthread_create");
    CHECK(frames[2]["function"].is_string());
    CHECK_FALSE(frames[2]["module"].get<std::string>().starts_with("libc.so"));
}

}  // namespace

TEST_SUITE("event stacks")
{
    TEST_CASE("stop create, then bt: __nptl_create_event, pthread_create, then fx_create (the fixture's caller) with file:line")
    {
        require_ptrace();
        auto run = run_tdctl(with_program(stop_then_bt("create"), {fixture_path("churn"), "1", "1"}), 60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        json frames = reporter_stack(run, "TD_CREATE");
        INFO(frames.dump());
        REQUIRE(frames.size() >= 4);
        CHECK(functions_of(frames)[0] == "__nptl_create_event");
        CHECK(functions_of(frames)[1] == "pthread_create");
        CHECK(functions_of(frames)[2] == "fx_create");
        CHECK(frames[2]["file"] == "fixture_common.h");
        CHECK(frames[2]["line"].get<int>() > 0);
        CHECK(find_function(frames, "main", 3) >= 3);
    }

    TEST_CASE("stop death, then bt: __nptl_death_event, then start_thread")
    {
        require_ptrace();
        // New threads start with reporting off: the outer thread is enabled
        // while its creation holds the target, then its death is awaited
        // (after it started and joined its 50 inner threads).
        auto run = run_tdctl({"--json", "-e", "event set create,death", "-e", "event enable on all", "-e",
                              "stop create --for 30", "-e", "event enable on all", "-e", "continue", "-e",
                              "stop death --for 30", "-e", "bt all", "-e", "continue", "--", fixture_path("churn"), "1",
                              "50"},
                             60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        json frames = reporter_stack(run, "TD_DEATH");
        INFO(frames.dump());
        REQUIRE(frames.size() >= 2);
        CHECK(functions_of(frames)[0] == "__nptl_death_event");
        CHECK(find_function(frames, "start_thread", 1) >= 1);
    }

    TEST_CASE("the agent's reporting functions: __tdagent_event_create, then pthread_create, then fx_create")
    {
        require_ptrace();
        auto args = stop_then_bt("create");
        args.insert(args.begin(), "--agent");
        auto run = run_tdctl(with_program(args, {fixture_path("churn"), "1", "1"}), 60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        json frames = reporter_stack(run, "TD_CREATE");
        INFO(frames.dump());
        REQUIRE(frames.size() >= 3);
        CHECK(functions_of(frames)[0] == "__tdagent_event_create");
        CHECK(frames[0]["module"].get<std::string>().starts_with("libtdagent.so"));
        int create = find_function(frames, "pthread_create", 1);
        CHECK(create >= 1);
        CHECK(find_function(frames, "fx_create", static_cast<std::size_t>(std::max(create, 1))) > create);
    }

    TEST_CASE("python3: stop create, then bt: __nptl_create_event, pthread_create, then python's own code")
    {
        require_ptrace();
        auto python = python_binary();
        if (!python)
            skip_test("python3 is not installed");
        auto run = run_tdctl(with_program(stop_then_bt("create"), {*python, "-c", python_threads}), 60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        check_create_stack(reporter_stack(run, "TD_CREATE"));
    }

    TEST_CASE("node: stop create, then bt: __nptl_create_event, pthread_create, then node's own code")
    {
        require_ptrace();
        auto node = find_program("node");
        if (!node)
            skip_test("node is not installed");
        auto run = run_tdctl(with_program(stop_then_bt("create"), {*node, "-e", "0"}), 60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        check_create_stack(reporter_stack(run, "TD_CREATE"));
    }

    TEST_CASE("watch --bt --count N on churn: every event has frames; fx_create in every TD_CREATE stack")
    {
        require_ptrace();
        constexpr int count = 40;
        temp_file record("stack-churn");
        auto run = run_tdctl({"--json", "-e", fmt::format("watch --bt --count {}", count), "--", fixture_path("churn"),
                              "--record", record.path(), "4", "10"},
                             60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        auto events = run.of_type("event");
        REQUIRE(events.size() == count);
        for (const auto& e : events) {
            INFO(e.dump());
            REQUIRE(e.contains("frames"));
            const json& frames = e["frames"];
            REQUIRE(frames.size() >= 2);
            if (e["event"] == "TD_CREATE") {
                CHECK(frames[0]["function"] == "__nptl_create_event");
                CHECK(find_function(frames, "fx_create") > 0);
                // The creator is the reporter: main or an outer thread.
                CHECK((find_function(frames, "main") > 0 || find_function(frames, "outer_main") > 0));
            } else {
                CHECK(e["event"] == "TD_DEATH");
                CHECK(frames[0]["function"] == "__nptl_death_event");
                CHECK(find_function(frames, "start_thread") > 0);
            }
        }
    }

    TEST_CASE("watch --bt=DEPTH bounds the frames; a bad depth is a usage error")
    {
        require_ptrace();
        auto run = run_tdctl({"--json", "-e", "watch create --bt=2 --count 3", "--", fixture_path("churn"), "1", "5"},
                             60s);
        INFO(run.describe());
        auto events = run.events("TD_CREATE");
        REQUIRE(events.size() == 3);
        for (const auto& e : events)
            CHECK(e["frames"].size() == 2);
        auto bad = run_tdctl({"-e", "watch --bt=0", "--", fixture_path("churn"), "1", "1"}, 60s);
        CHECK(bad.result.status.exit_code() == 2);
        CHECK(bad.result.err.find("bad bt depth '0'") != std::string::npos);
    }

    TEST_CASE("watch --bt in text: the frames follow each event line")
    {
        require_ptrace();
        auto run = run_tdctl({"-e", "watch create --bt --count 1", "--", fixture_path("churn"), "1", "1"}, 60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        auto at = run.result.out.find("TD_CREATE");
        REQUIRE(at != std::string::npos);
        auto rest = run.result.out.substr(at);
        CHECK(rest.find("\n  #0   ") != std::string::npos);
        CHECK(rest.find("__nptl_create_event+0x0 (libc.so.6)") != std::string::npos);
        CHECK(rest.find(" in fx_create+0x") != std::string::npos);
        CHECK(rest.find(" at fixture_common.h:") != std::string::npos);
    }

    TEST_CASE("TD_CREATE names the new thread's start routine; TD_DEATH its lifetime")
    {
        require_ptrace();
        temp_file record("stack-start");
        auto run = run_tdctl({"--json", "--", fixture_path("churn"), "--record", record.path(), "2", "3"}, 60s);
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        auto creates = run.events("TD_CREATE");
        auto deaths = run.events("TD_DEATH");
        REQUIRE(creates.size() == 8);
        REQUIRE(deaths.size() == 8);
        // The fixture's own record: which TIDs ran outer_main, which inner_main.
        std::map<pid_t, std::string> role;
        for (const auto& f : facts_of_kind(read_record(record.path()), "thread"))
            role[static_cast<pid_t>(f.id())] = f.label();
        REQUIRE(role.size() == 8);
        std::map<pid_t, double> created_at;
        for (const auto& c : creates) {
            INFO(c.dump());
            pid_t tid = static_cast<pid_t>(int_field(c, "tid"));
            REQUIRE(role.contains(tid));
            CHECK(c["startsym"] == (role[tid] == "outer" ? "outer_main" : "inner_main"));
            CHECK(hex_field(c, "startfunc") != 0);
            created_at[tid] = c["time"].get<double>();
        }
        for (const auto& d : deaths) {
            INFO(d.dump());
            REQUIRE(d.contains("lifetime_ns"));
            const double lifetime = static_cast<double>(d["lifetime_ns"].get<std::uint64_t>()) / 1e9;
            const double died_at = d["time"].get<double>();
            pid_t tid = static_cast<pid_t>(int_field(d, "tid"));
            REQUIRE(created_at.contains(tid));
            // Born at its clone stop, a little before its TD_CREATE was
            // drained; tdctl was running before either.
            CHECK(lifetime >= died_at - created_at[tid] - 0.0005);
            CHECK(lifetime <= died_at);
        }
    }
}
