// `bt`: the call stack of every LWP, unwound with libdw while the target is
// held, checked against what the sleeper fixture's threads are known to be
// doing (main and the workers block in pause()) and against /proc.
#include <doctest/doctest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <signal.h>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

// gdb's `thread apply all bt`: per LWP, frame number -> pc (gdb leaves a
// pc out at the start of a line, and stops at main).
std::map<pid_t, std::map<std::size_t, std::uint64_t>> gdb_caller_pcs(const std::string& text)
{
    static const std::regex thread_line(R"(^Thread \d+ .*\(LWP (\d+)\))");
    static const std::regex frame_line(R"(^#(\d+)\s+0x([0-9a-f]+) in )");
    std::map<pid_t, std::map<std::size_t, std::uint64_t>> out;
    std::map<std::size_t, std::uint64_t>* current = nullptr;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_search(line, m, thread_line))
            current = &out[std::stoi(m[1])];
        else if (current && std::regex_search(line, m, frame_line))
            (*current)[std::stoul(m[1])] = std::stoull(m[2], nullptr, 16);
    }
    return out;
}

}  // namespace

TEST_CASE("bt agrees with gdb: the same pc and return addresses, frame by frame, for every thread")
{
    require_attach();
    auto gdb = find_program("gdb");
    if (!gdb)
        skip_test("gdb is not installed");
    temp_file record("bt-gdb");
    auto target = start_fixture("sleeper", {"--record", record.path(), "2"}, record.path());
    auto ours = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", "bt"}, 30s);
    INFO(ours.describe());
    REQUIRE(ours.result.status.exit_code() == 0);
    auto theirs = run_command({*gdb, "-nx", "-batch", "-ex", "thread apply all bt", "-p", std::to_string(target.pid())},
                              60s);
    auto gdb_pcs = gdb_caller_pcs(theirs.out);
    if (gdb_pcs.empty())
        skip_test("gdb could not attach: " + theirs.describe());
    auto traces = records_of_type(ours.records, "backtrace");
    REQUIRE(traces.size() == gdb_pcs.size());
    for (const auto& t : traces) {
        pid_t tid = static_cast<pid_t>(int_field(t, "tid"));
        const json& frames = t["frames"];
        INFO("tid ", tid, ": ", frames.dump(), "\ngdb: ", theirs.out);
        REQUIRE(gdb_pcs.contains(tid));
        std::size_t compared = 0;
        for (const auto& [index, pc] : gdb_pcs[tid]) {
            if (index >= frames.size())
                continue;
            CHECK_MESSAGE(hex_field(frames[index], "pc") == pc, "frame #", index);
            ++compared;
        }
        CHECK(compared >= 3);
    }
}

TEST_CASE("bt lists every LWP with its stack: pause() under main for the main thread, under start_thread for workers")
{
    require_attach();
    temp_file record("bt-sleeper");
    auto target = start_fixture("sleeper", {"--record", record.path(), "3"}, record.path());
    const pid_t pid = target.pid();
    std::set<pid_t> tids = live_tids(pid);

    auto run = run_tdctl({"--json", "-p", std::to_string(pid), "-e", "bt"}, 30s);
    INFO(run.describe());
    REQUIRE(run.result.status.exit_code() == 0);
    auto traces = records_of_type(run.records, "backtrace");
    REQUIRE(traces.size() == tids.size());
    std::set<pid_t> seen;
    for (const auto& t : traces) {
        pid_t tid = static_cast<pid_t>(int_field(t, "tid"));
        seen.insert(tid);
        const json& frames = t["frames"];
        INFO("tid ", tid, ": ", frames.dump());
        REQUIRE(frames.size() >= 3);
        CHECK(frames[0]["module"].get<std::string>().starts_with("libc.so"));
        CHECK(has_function(frames, "pause"));
        CHECK(has_function(frames, "fx_block_forever"));
        if (tid == pid)
            CHECK(has_function(frames, "main"));
        else
            CHECK(has_function(frames, "start_thread"));
    }
    CHECK(seen == tids);
    // Held only for the unwind: the fixture is running and untraced again.
    CHECK(tracer_pid(pid) == 0);
    for (const auto& [tid, state] : task_states(pid))
        CHECK_MESSAGE(state != 't', "task ", tid, " left in a tracing stop");
}

TEST_CASE("bt of a TID that is not in the process: ESRCH, exit 2")
{
    require_attach();
    temp_file record("bt-sleeper-bad");
    auto target = start_fixture("sleeper", {"--record", record.path(), "1"}, record.path());
    auto run = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", fmt::format("bt {}", unused_pid())}, 30s);
    INFO(run.describe());
    CHECK(run.result.status.exit_code() == 2);
    auto errors = records_of_type(run.records, "error");
    REQUIRE(errors.size() == 1);
    CHECK(errors[0]["error"] == "ESRCH");
}

TEST_CASE("bt names C++ functions as people read them (demangled)")
{
    require_attach();
    auto target = child_process::spawn({BT_CPP_TARGET});
    REQUIRE(target.require_line(10s) == "ready");
    auto run = run_tdctl({"--json", "-p", std::to_string(target.pid()), "-e", "bt"}, 30s);
    INFO(run.describe());
    REQUIRE(run.result.status.exit_code() == 0);
    auto traces = records_of_type(run.records, "backtrace");
    REQUIRE(traces.size() == 1);
    const json& frames = traces[0]["frames"];
    INFO(frames.dump());
    CHECK(has_function(frames, "bt_fixture::parking::wait_here(int)"));
    CHECK_FALSE(has_function(frames, "_ZN10bt_fixture7parking9wait_hereEi"));
    CHECK(tracer_pid(target.pid()) == 0);
}

// The START column of `threads` showed the mangled symbol
// (_ZN10bt_fixture13parked_workerEPv) while `bt` demangled (issue 12).
// TD_CREATE named C++ start routines mangled (_ZN10bt_fixture...) where
// threads, bt and the summaries demangled them.
TEST_CASE("TD_CREATE names a C++ start routine demangled, in text and JSON")
{
    require_ptrace();
    const std::string plain = "bt_fixture::parked_worker(void*)";
    for (bool as_json : {false, true}) {
        CAPTURE(as_json);
        std::vector<std::string> args{"-e", "watch --count 1", "-e", "kill", "--", BT_CPP_TARGET, "thread"};
        if (as_json)
            args.insert(args.begin(), "--json");
        auto run = run_tdctl(args, 30s);
        INFO(run.describe());
        const std::string all = run.result.out + run.result.err;
        CHECK(all.find("_ZN10bt_fixture") == std::string::npos);
        if (!as_json) {
            CHECK(all.find(plain) != std::string::npos);
            continue;
        }
        auto creates = run.events("TD_CREATE");
        REQUIRE(creates.size() == 1);
        CHECK(creates[0]["startsym"] == plain);
    }
}

TEST_CASE("threads names a C++ start routine as bt does (demangled), text and JSON")
{
    require_attach();
    auto target = child_process::spawn({BT_CPP_TARGET, "thread"});
    REQUIRE(target.require_line(10s) == "ready");
    const std::string pid = std::to_string(target.pid());
    const std::string plain = "bt_fixture::parked_worker(void*)";
    auto text = run_tdctl({"-p", pid, "-e", "threads"}, 30s);
    INFO(text.describe());
    REQUIRE(text.result.status.exit_code() == 0);
    CHECK(text.result.out.find(plain) != std::string::npos);
    CHECK(text.result.out.find("_ZN10bt_fixture") == std::string::npos);
    auto run = run_tdctl({"--json", "-p", pid, "-e", "threads"}, 30s);
    INFO(run.describe());
    int workers = 0;
    for (const auto& t : records_of_type(run.records, "thread"))
        workers += t["startsym"].is_string() && t["startsym"].get<std::string>() == plain;
    CHECK(workers == 1);
    CHECK(tracer_pid(target.pid()) == 0);
}

// `bt all` lists every task the hold knows; on a thread storm some of them
// are past their exit when their turn comes. Such a thread was an error
// ("LWP N is not stopped by tdctl") that failed the batch, 22 tries in 40:
// now it is skipped and counted, and the commands after it run.
TEST_CASE("bt all during a thread storm: 100 tries, no failed batch, ended threads counted")
{
    require_attach();
    auto target = child_process::spawn({fixture_path("storm"), "--wait-start", "0"});
    REQUIRE(target.require_line(10s) == fmt::format("ready {}", target.pid()));
    REQUIRE(target.write_stdin("x"));
    const std::string pid = std::to_string(target.pid());
    std::size_t skipped = 0, unwound = 0;
    for (int i = 0; i < 100; ++i) {
        // The watch lets the storm run between the attach and the hold.
        auto run = run_tdctl({"--json", "-p", pid, "-e", "watch --for 0.05", "-e", "bt all", "-e", "threads"}, 60s);
        INFO("try ", i, ": ", run.describe().substr(0, 3000));
        REQUIRE(run.result.status.exit_code() == 0);
        REQUIRE(records_of_type(run.records, "error").empty());
        REQUIRE_FALSE(records_of_type(run.records, "thread").empty());
        std::set<pid_t> traced;
        for (const auto& bt : records_of_type(run.records, "backtrace"))
            traced.insert(bt["tid"].get<pid_t>());
        REQUIRE_FALSE(traced.empty());
        unwound += traced.size();
        for (const auto& rec : records_of_type(run.records, "bt_skipped")) {
            auto tids = rec["tids"].get<std::vector<pid_t>>();
            CHECK(rec["count"].get<std::size_t>() == tids.size());
            CHECK_FALSE(tids.empty());
            for (pid_t tid : tids)
                CHECK_FALSE(traced.contains(tid));
            skipped += tids.size();
        }
    }
    MESSAGE("bt all on a storm: ", unwound, " stacks read, ", skipped, " ended threads skipped in 100 tries");
    CHECK(tracer_pid(target.pid()) == 0);
    CHECK(::kill(target.pid(), 0) == 0);
}
