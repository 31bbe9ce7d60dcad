// `bt` again and again on a process whose executable changes extent in
// /proc/PID/maps between stacks while one thread runs code in anonymous
// memory (the remapper fixture: what node does with its embedded builtins
// and JIT code). Every pc found outside the modules makes the unwinder
// report the maps again, and libdwfl then drops the executable's module and
// makes a new one. tdctl must neither abort nor lose the stacks. tdctl runs
// with glibc's malloc scribbling over freed memory (MALLOC_PERTURB_, no
// tcache), so a use of anything libdwfl freed with the dropped module fails
// at once instead of once in a while.
#include <doctest/doctest.h>

#include <set>
#include <sstream>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

// The unnamed executable mappings of /proc/PID/maps, as [start, end).
std::vector<std::pair<std::uint64_t, std::uint64_t>> anonymous_code(pid_t pid)
{
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    std::istringstream maps(read_text_file(fmt::format("/proc/{}/maps", pid)).value_or(""));
    for (std::string line; std::getline(maps, line);) {
        std::istringstream fields(line);
        std::string range, perms, offset, dev, path;
        unsigned long inode = 1;
        fields >> range >> perms >> offset >> dev >> inode >> path;
        if (perms.size() == 4 && perms[2] == 'x' && inode == 0 && path.empty()) {
            auto dash = range.find('-');
            out.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16),
                             std::stoull(range.substr(dash + 1), nullptr, 16));
        }
    }
    return out;
}

// Stacks taken, with the target running 30 ms between two.
constexpr int rounds = 12;

}  // namespace

TEST_CASE("bt while the executable is remapped and a thread runs anonymous code: no abort, every stack read")
{
    require_attach();
    temp_file record("bt-remap");
    auto target = start_fixture("remapper", {"--record", record.path()}, record.path());
    const pid_t pid = target.pid();
    const auto jit = facts_of_kind(read_record(record.path()), "thread");
    REQUIRE(jit.size() == 1);
    const auto jit_tid = static_cast<pid_t>(jit[0].number(0));
    const auto code_page = anonymous_code(pid);
    REQUIRE(code_page.size() == 1);

    std::vector<std::string> args{"--json", "-p", std::to_string(pid)};
    for (int i = 0; i < rounds; ++i)
        args.insert(args.end(), {"-e", fmt::format("bt {}", jit_tid), "-e", fmt::format("bt {}", pid), "-e",
                                 "sleep 30ms"});
    run_options env;
    env.env = {{"MALLOC_PERTURB_", "165"}, {"GLIBC_TUNABLES", "glibc.malloc.tcache_count=0"}};
    auto run = run_tdctl(args, 60s, env);
    INFO(run.describe());
    CHECK(run.result.err.find("Assertion") == std::string::npos);
    REQUIRE(run.result.status.exit_code() == 0);

    auto traces = records_of_type(run.records, "backtrace");
    REQUIRE(traces.size() == 2 * rounds);
    std::set<std::uint64_t> jit_pcs;
    for (const auto& t : traces) {
        const json& frames = t["frames"];
        INFO("tid ", int_field(t, "tid"), ": ", frames.dump());
        REQUIRE(!frames.empty());
        if (int_field(t, "tid") == jit_tid) {
            // In the fixture's code page, which no module holds; start_thread below.
            const std::uint64_t pc = hex_field(frames[0], "pc");
            CHECK(pc >= code_page[0].first);
            CHECK(pc < code_page[0].second);
            CHECK(frames[0]["function"].is_null());
            jit_pcs.insert(pc);
        } else {
            CHECK(int_field(t, "tid") == pid);
            CHECK(has_function(frames, "main"));
        }
    }
    // The premise: pcs outside every module, new ones after the first stack,
    // so the maps were looked at (and reported) again while attached.
    CHECK(jit_pcs.size() >= 2);
    CHECK(tracer_pid(pid) == 0);
}
