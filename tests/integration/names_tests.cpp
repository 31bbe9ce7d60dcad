// Names as a user reads them. Plain C symbols are no C++ names: the c_names
// fixture's start routines `f`, `i`, `v` and its lock array `m` were shown
// as "float", "int", "void" and "unsigned long" (the demangler read them as
// type codes). A library whose file is named "evil (deleted)" (a copy of
// libfx_plugin.so, loaded by plugin_host) was shown as "evil".
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
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
