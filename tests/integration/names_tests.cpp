// Names as a user reads them. Plain C symbols are no C++ names: the c_names
// fixture's start routines `f`, `i`, `v` and its lock array `m` were shown
// as "float", "int", "void" and "unsigned long" (the demangler read them as
// type codes). A library whose file is named "evil (deleted)" (a copy of
// libfx_plugin.so, loaded by plugin_host) was shown as "evil". A thread
// named 'a b) c' (the named fixture), which breaks naive parsers of
// /proc/PID/task/TID/stat, is listed and named in its events exactly.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

// The names the demangler gives f, i, v and m.
const std::vector<std::string> type_names{"float", "int", "void", "unsigned long"};

bool names_a_type(const std::string& text)
{
    for (const auto& t : type_names)
        if (text == t || text.starts_with(t + "+") || text.starts_with(t + "("))
            return true;
    return false;
}

// TID -> start routine, from the fixture's own "thread <tid> <handle> <label>" lines.
std::map<pid_t, std::string> start_routines(const std::string& record_path)
{
    std::map<pid_t, std::string> out;
    for (const auto& f : facts_of_kind(read_record(record_path), "thread"))
        out[f.id()] = f.label();
    return out;
}

}  // namespace

TEST_CASE("C start routines named f, i, v keep their names: TD_CREATE, text and JSON")
{
    require_ptrace();
    for (bool as_json : {false, true}) {
        CAPTURE(as_json);
        std::vector<std::string> args{"-e", "watch --count 3", "-e", "kill", "--", fixture_path("c_names")};
        if (as_json)
            args.insert(args.begin(), "--json");
        auto run = run_tdctl(args, 60s);  // exits as the killed fixture did
        INFO(run.describe());
        for (const auto& t : type_names)
            CHECK(run.result.out.find(" (" + t + ")") == std::string::npos);
        if (!as_json) {
            for (const char* name : {"f", "i", "v"})
                CHECK(run.result.out.find(fmt::format(" ({})", name)) != std::string::npos);
            continue;
        }
        // Main creates f, i and v one after another: their reports come in that order.
        auto creates = run.events("TD_CREATE");
        REQUIRE(creates.size() == 3);
        CHECK(creates[0]["startsym"] == "f");
        CHECK(creates[1]["startsym"] == "i");
        CHECK(creates[2]["startsym"] == "v");
    }
}

TEST_CASE("threads and bt name the C start routines f, i, v as the fixture's threads record them")
{
    require_attach();
    temp_file record("c-names");
    auto target = start_fixture("c_names", {"--record", record.path()}, record.path());
    const auto routines = start_routines(record.path());
    REQUIRE(routines.size() == 3);
    const std::string pid = std::to_string(target.pid());

    auto threads = run_tdctl({"--json", "-p", pid, "-e", "threads"}, 30s);
    INFO(threads.describe());
    REQUIRE(threads.result.status.exit_code() == 0);
    int named = 0;
    for (const auto& t : records_of_type(threads.records, "thread")) {
        INFO(t.dump());
        if (!t["tid"].is_number() || !routines.contains(t["tid"].get<pid_t>()))
            continue;
        CHECK(t["startsym"] == routines.at(t["tid"].get<pid_t>()));
        ++named;
    }
    CHECK(named == 3);

    auto text = run_tdctl({"-p", pid, "-e", "threads"}, 30s);
    INFO(text.describe());
    REQUIRE(text.result.status.exit_code() == 0);
    for (const auto& t : type_names)
        CHECK(text.result.out.find("(" + t + ")") == std::string::npos);
    for (const char* name : {"f", "i", "v"})
        CHECK(text.result.out.find(fmt::format("({})", name)) != std::string::npos);

    auto bt = run_tdctl({"--json", "-p", pid, "-e", "bt"}, 30s);
    INFO(bt.describe());
    REQUIRE(bt.result.status.exit_code() == 0);
    int unwound = 0;
    for (const auto& trace : records_of_type(bt.records, "backtrace")) {
        const json& frames = trace["frames"];
        INFO(frames.dump());
        for (const auto& f : frames)
            CHECK_FALSE((f["function"].is_string() && names_a_type(f["function"].get<std::string>())));
        auto it = routines.find(trace["tid"].get<pid_t>());
        if (it == routines.end())
            continue;
        CHECK(has_function(frames, it->second));
        ++unwound;
    }
    CHECK(unwound == 3);
    CHECK(tracer_pid(target.pid()) == 0);
}

TEST_CASE("locks names the two mutexes of `static pthread_mutex_t m[2]` m and m+0x28")
{
    require_ptrace();
    temp_file record("c-names-locks");
    temp_file out("c-names-locks-json");
    // JSON to a file: the launched fixture shares tdctl's stdout.
    auto run = run_tdctl({"--agent", "--json", "-o", out.path(), "-e", "locks --for 60", "--",
                          fixture_path("c_names"), "--record", record.path(), "exit"},
                         120s);
    INFO(run.describe());
    REQUIRE(run.result.status.exit_code() == 0);
    auto facts = read_record(record.path());
    REQUIRE(count_kind(facts, "done") == 1);
    auto mutexes = facts_of_kind(facts, "mutex");
    REQUIRE(mutexes.size() == 2);
    const auto m0 = static_cast<std::uint64_t>(mutexes[0].number(0));
    const auto m1 = static_cast<std::uint64_t>(mutexes[1].number(0));
    const std::map<std::uint64_t, std::string> want{{m0, "m"}, {m1, fmt::format("m+{:#x}", m1 - m0)}};

    auto text = read_text_file(out.path());
    REQUIRE(text.has_value());
    INFO(*text);
    std::map<std::uint64_t, std::string> got;
    for (const auto& r : records_of_type(parse_records(*text), "lock")) {
        got[hex_field(r, "address")] = r["symbol"].get<std::string>();
        CHECK(r["module"] == "c_names");
    }
    CHECK(got.size() == want.size());
    for (const auto& [address, name] : want) {
        CAPTURE(address);
        CHECK(got[address] == name);
    }
}

TEST_CASE("a library whose file name ends in \" (deleted)\" keeps its whole name")
{
    require_ptrace();
    temp_directory dir("tdctl-names");
    const std::string evil = dir.path() + "/evil (deleted)";
    std::filesystem::copy_file(fixture_path("libfx_plugin.so"), evil);
    auto run = run_tdctl({"--json", "--", fixture_path("plugin_host"), evil, "2"}, 60s);
    INFO(run.describe());
    REQUIRE(run.result.status.exit_code() == 0);
    auto creates = run.events("TD_CREATE");
    REQUIRE(creates.size() == 2);
    for (const auto& e : creates)
        CHECK(e["startsym"] == "fx_plugin_worker");
    int summarized = 0;
    for (const auto& r : run.of_type("summary_lifetime")) {
        INFO(r.dump());
        if (r.value("symbol", "") != "fx_plugin_worker")
            continue;
        CHECK(r.value("module", "") == "evil (deleted)");
        ++summarized;
    }
    CHECK(summarized >= 1);
}

TEST_CASE("named: the thread name 'a b) c' is listed exactly, in JSON and in text, and named in its events")
{
    require_attach();
    temp_file record("named-record");
    auto target = start_fixture("named", {"--record", record.path()}, record.path());
    const pid_t pid = target.pid();
    auto facts = read_record(record.path());
    auto named = facts_of_kind(facts, "thread");
    REQUIRE(named.size() == 1);
    REQUIRE(named[0].label() == "a b) c");
    const pid_t tid = named[0].id();
    REQUIRE(task_comm(pid, tid) == "a b) c");

    auto run = run_tdctl({"--json", "-p", std::to_string(pid), "-e", "threads"}, 30s);
    {
        INFO(run.describe());
        CHECK(run.result.status.exit_code() == 0);
        auto threads = run.of_type("thread");
        CHECK(threads.size() == 2);
        auto it = std::find_if(threads.begin(), threads.end(),
                               [&](const json& t) { return int_field(t, "tid") == tid; });
        REQUIRE(it != threads.end());
        CHECK((*it)["name"] == "a b) c");
        CHECK(hex_field(*it, "handle") == named[0].handle());
    }
    auto text = run_tdctl({"-p", std::to_string(pid), "-e", "threads"}, 30s);
    {
        INFO(text.describe());
        CHECK(text.result.status.exit_code() == 0);
        bool found = false;
        std::istringstream lines(text.result.out);
        for (std::string line; std::getline(lines, line);)
            if (line.find("a b) c") != std::string::npos && line.find(std::to_string(tid)) != std::string::npos &&
                line.find(fmt::format("{:#x}", named[0].handle())) != std::string::npos)
                found = true;
        CHECK_MESSAGE(found, "no line with the TID, the name 'a b) c' and the handle");
    }
    CHECK(tracer_pid(pid) == 0);

    // Events about threads that bear the name when they are reported:
    // the named thread starts a child (named so from its clone on), and
    // both end, while a watch is armed. Armed means: both reporting
    // addresses planted, the global mask changed and the named thread
    // reporting, read past tdctl.
    const auto regions = nptl_regions(pid, {named[0].handle()});
    const auto before = take_snapshot(pid, regions);
    auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                       "watch create,death --count 3 --for 30"});
    REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
    auto armed = [&] {
        auto now = take_snapshot(pid, regions);
        const auto flag = now.at(fmt::format("{:#x}.report_events", named[0].handle()));
        return now.at("text __nptl_create_event") != before.at("text __nptl_create_event") &&
               now.at("text __nptl_death_event") != before.at("text __nptl_death_event") &&
               now.at("__nptl_threads_events") != before.at("__nptl_threads_events") &&
               std::any_of(flag.begin(), flag.end(), [](std::uint8_t b) { return b != 0; });
    };
    REQUIRE_MESSAGE(wait_until(armed, 10s), "the watch did not arm: "
                                                << snapshot_difference(before, take_snapshot(pid, regions)));
    CHECK(target.ask("end", 20s) == "ended");
    auto status = tdctl.require_exit(40s);
    INFO("tdctl stdout:\n" << tdctl.stdout_text() << "stderr:\n" << tdctl.stderr_text());
    CHECK(status.exit_code() == 0);

    facts = read_record(record.path());
    INFO("record: " << format_record(facts));
    auto threads = facts_of_kind(facts, "thread");
    REQUIRE(threads.size() == 2);
    const pid_t child = threads[1].id();
    // The fixture's own account of the child's name (read back by the
    // child itself) and of both ends.
    REQUIRE(threads[1].label() == "a b) c");
    std::set<pid_t> exits;
    for (const auto& f : facts_of_kind(facts, "exit"))
        exits.insert(f.id());
    CHECK(exits == std::set<pid_t>{tid, child});

    auto records = parse_records(tdctl.stdout_text());
    auto creates = event_records(records, "TD_CREATE");
    auto deaths = event_records(records, "TD_DEATH");
    REQUIRE(creates.size() == 1);
    CHECK(int_field(creates[0], "tid") == child);
    CHECK(int_field(creates[0], "reporter") == tid);
    CHECK(hex_field(creates[0], "handle") == threads[1].handle());
    CHECK(creates[0].value("name", "") == threads[1].label());
    REQUIRE(deaths.size() == 2);
    std::map<pid_t, std::string> death_names;
    for (const auto& d : deaths)
        death_names[static_cast<pid_t>(int_field(d, "tid"))] = d.value("name", "");
    CHECK(death_names == std::map<pid_t, std::string>{{tid, named[0].label()}, {child, threads[1].label()}});
    auto bad = malformed_thread_events(creates) + malformed_thread_events(deaths);
    CHECK_MESSAGE(bad.empty(), bad);
    auto ends = records_of_type(records, "watch_end");
    REQUIRE(ends.size() == 1);
    CHECK(ends[0]["reason"] == "count");

    // Put back (the process-wide part; both threads are gone).
    CHECK(tracer_pid(pid) == 0);
    const auto global = nptl_regions(pid, {});
    memory_snapshot global_before;
    for (const auto& r : global)
        global_before[r.name] = before.at(r.name);
    auto diff = snapshot_difference(global_before, take_snapshot(pid, global));
    CHECK_MESSAGE(diff.empty(), "changed by tdctl:\n" << diff);
    CHECK(target.ask("ping") == "pong");
    CHECK(wait_until([&] { return live_tids(pid) == std::set<pid_t>{pid}; }, 5s));
}
