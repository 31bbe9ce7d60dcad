// `tdctl -p PID --agent` while the target dlopen()s a module of its own
// (fixtures/e2e_late_module.c loading fixtures/e2e_late_lib.c): the module is
// routed when the loader has relocated it, before any of its code runs, so
// `locks` sees its contention with the fixture's own count; after detach
// every import slot of the module holds what the loader put there without
// tdctl (a load before the attach, rebased when the module lands elsewhere);
// a module dlclose()d while attached has its slots dropped: tdctl says so,
// and memory the fixture maps over the old range, holding a copy of the
// module's writable pages (routed slots included), is left untouched by the
// detach.
//
// Timings: `locks` runs 8 s and the contention (3 rounds of 20 ms) starts
// once tdctl has armed, so a loaded machine has seconds of slack.
#include <doctest/doctest.h>

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "symbols/elf_module.hpp"
#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;

namespace {

const char* const late_lib = "libe2e_late_lib.so";

/// The fixture, waiting for commands.
test::child_process start_fixture()
{
    auto p = test::child_process::spawn({fixture_path("e2e_late_module"), fixture_path(late_lib)});
    std::string line = p.require_line(30s);
    REQUIRE_MESSAGE(line.starts_with("ready "), line);
    return p;
}

/// "key=0x..." in a fixture's answer.
std::uint64_t field_of(const std::string& line, const std::string& key)
{
    auto at = line.find(key + "=");
    REQUIRE_MESSAGE(at != std::string::npos, line);
    return std::stoull(line.substr(at + key.size() + 1), nullptr, 0);
}

/// One import slot of the late module: its offset from the load bias and value.
struct slot_value {
    std::string name;
    std::uint64_t offset = 0;
    std::uint64_t value = 0;
};

/// Every import slot (JUMP_SLOT, GLOB_DAT) of the late module, read through /proc/PID/mem.
std::vector<slot_value> read_slots(pid_t pid, std::uint64_t& bias)
{
    auto modules = symbols::module_set::load(pid);
    const auto* m = modules.find(late_lib);
    REQUIRE(m != nullptr);
    bias = m->load_bias().value;
    std::vector<slot_value> out;
    for (const auto& s : m->import_slots()) {
        auto bytes = test::read_proc_mem(pid, s.address.value, 8);
        REQUIRE(bytes.size() == 8);
        std::uint64_t v = 0;
        std::memcpy(&v, bytes.data(), 8);
        out.push_back({s.name, s.address.value - bias, v});
    }
    REQUIRE_FALSE(out.empty());
    return out;
}

/// Slots whose value differs from the untraced load's (values inside the
/// module moved by the difference of the two load biases).
std::string slot_differences(const std::vector<slot_value>& before, std::uint64_t bias_before,
                             const std::vector<slot_value>& after, std::uint64_t bias_after)
{
    std::string out;
    if (before.size() != after.size())
        return "the number of import slots differs\n";
    for (std::size_t i = 0; i < before.size(); ++i) {
        std::uint64_t want = before[i].value;
        if (want >= bias_before && want < bias_before + (1u << 24))
            want = want - bias_before + bias_after;
        if (after[i].offset != before[i].offset || after[i].value != want)
            out += fmt::format("{} at +{:#x}: {:#x}, before {:#x}\n", after[i].name, after[i].offset, after[i].value,
                               want);
    }
    return out;
}

/// The agent's global event mask, non-zero once a command armed its events.
std::uint64_t agent_global_mask(pid_t pid)
{
    auto modules = symbols::module_set::load(pid);
    const auto* agent = modules.find("libtdagent.so");
    REQUIRE(agent != nullptr);
    auto mask = agent->lookup("__tdagent_threads_events");
    REQUIRE(mask.has_value());
    auto bytes = test::read_proc_mem(pid, mask->address.value, 8);
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data(), std::min<std::size_t>(8, bytes.size()));
    return v;
}

/// `tdctl --json --batch -p PID --agent`, fed commands on stdin.
class attached_tdctl {
public:
    explicit attached_tdctl(pid_t pid)
        : process_(test::child_process::spawn(
              {test::tdctl_path(), "--json", "--batch", "-p", std::to_string(pid), "--agent", "--follow-loads"}))
    {
        wait_for([](const nlohmann::json& r) { return r.value("type", "") == "agent"; }, "the agent record");
    }
    void send(const std::string& command) { REQUIRE(process_.write_stdin(command + "\n")); }
    /// Reads records until one satisfies `want` (at most 60 s); returns it.
    template <typename Want>
    nlohmann::json wait_for(Want want, const char* what)
    {
        for (;;) {
            auto line = process_.read_line(60s);
            REQUIRE_MESSAGE(line.has_value(), "no " << what << " from tdctl; stderr: " << process_.stderr_text());
            if (line->empty() || line->front() != '{')
                continue;
            auto r = nlohmann::json::parse(*line);
            records_.push_back(r);
            if (want(r))
                return r;
        }
    }
    /// `detach`, then the rest of the records; tdctl must exit 0.
    void detach()
    {
        send("detach");
        process_.close_stdin();
        auto status = process_.require_exit(60s);
        CHECK_MESSAGE(status.is_success(), status.describe() << "; stderr: " << process_.stderr_text());
        for (auto line = process_.read_line(1s); line; line = process_.read_line(1s))
            if (!line->empty() && line->front() == '{')
                records_.push_back(nlohmann::json::parse(*line));
    }
    /// Waits for tdctl to end by itself (its tracer killed, say); its status.
    test::exit_status wait_exit()
    {
        process_.close_stdin();
        return process_.require_exit(60s);
    }
    const std::vector<nlohmann::json>& records() const { return records_; }
    std::string stderr_text() { return process_.stderr_text(); }

private:
    test::child_process process_;
    std::vector<nlohmann::json> records_;
};

bool is_routing(const nlohmann::json& r, const char* action)
{
    return r.value("type", "") == "routing" && r.value("action", "") == action && r.value("module", "") == late_lib;
}

}  // namespace

TEST_CASE("a module loaded after the attach is routed: its contention seen, its GOT as without tdctl; 10 rounds")
{
    test::require_ptrace();
    auto fixture = start_fixture();
    const pid_t pid = fixture.pid();
    constexpr int rounds = 3;
    for (int cycle = 0; cycle < 10; ++cycle) {
        CAPTURE(cycle);
        // What the loader puts in the module's slots with no tracer.
        REQUIRE(fixture.ask("load", 30s).starts_with("loaded "));
        std::uint64_t bias_untraced = 0;
        auto untraced = read_slots(pid, bias_untraced);
        REQUIRE(fixture.ask("unload", 30s) == "unloaded");

        attached_tdctl tdctl(pid);
        std::string loaded = fixture.ask("load", 60s);
        REQUIRE(loaded.starts_with("loaded "));
        const std::uint64_t mutex = field_of(loaded, "mutex");
        auto routed = tdctl.wait_for([](const auto& r) { return is_routing(r, "routed"); }, "routing record");
        CHECK(routed.value("slots", 0) > 0);
        CHECK(routed.value("late", false));

        tdctl.send("locks --for 8");
        REQUIRE(test::wait_until([&] { return agent_global_mask(pid) != 0; }, 20s));
        REQUIRE(fixture.ask(fmt::format("contend {} 20", rounds), 60s) == fmt::format("contended {}", rounds));
        tdctl.wait_for([](const auto& r) { return r.value("type", "") == "locks_report"; }, "locks report");
        tdctl.detach();

        bool found = false;
        for (const auto& r : tdctl.records())
            if (r.value("type", "") == "lock" && std::stoull(r.value("address", "0"), nullptr, 0) == mutex) {
                found = true;
                CHECK(r.value("contentions", 0) == rounds);
            }
        CHECK_MESSAGE(found, "no lock record for late_lock at " << fmt::format("{:#x}", mutex));

        REQUIRE(test::wait_until([&] { return test::tracer_pid(pid) == std::optional<pid_t>(0); }, 5s));
        std::uint64_t bias_after = 0;
        auto after = read_slots(pid, bias_after);
        auto diff = slot_differences(untraced, bias_untraced, after, bias_after);
        CHECK_MESSAGE(diff.empty(), diff);
        REQUIRE(fixture.ask("ping") == "pong");
        REQUIRE(fixture.ask("unload", 30s) == "unloaded");
    }
}

TEST_CASE("a routed module dlclose()d while attached: its slots dropped, nothing written into its range at detach")
{
    test::require_ptrace();
    for (int round = 0; round < 3; ++round) {
        CAPTURE(round);
        auto fixture = start_fixture();
        const pid_t pid = fixture.pid();
        attached_tdctl tdctl(pid);
        REQUIRE(fixture.ask("load", 60s).starts_with("loaded "));
        auto routed = tdctl.wait_for([](const auto& r) { return is_routing(r, "routed"); }, "routing record");
        const int slots = routed.value("slots", 0);
        CHECK(slots > 0);

        // The fixture copies the module's writable pages (the routed slots
        // pointing into the agent), unloads it and maps the copy over its
        // range: a journal written back there would change it.
        std::string occupied = fixture.ask("unload-occupy", 60s);
        REQUIRE_MESSAGE(occupied.starts_with("occupied "), occupied);
        auto unloaded = tdctl.wait_for([](const auto& r) { return is_routing(r, "unloaded"); }, "unload record");
        CHECK(unloaded.value("slots", 0) == slots);
        CHECK(unloaded.value("written_back", -1) == 0);
        tdctl.detach();

        REQUIRE(test::wait_until([&] { return test::tracer_pid(pid) == std::optional<pid_t>(0); }, 5s));
        CHECK(fixture.ask("check-occupied") == "occupied-unchanged=1");
        CHECK(fixture.ask("ping") == "pong");
    }
}

TEST_CASE("the tracer SIGKILLed with a late module routed: its slots and the loader's breakpoint put back")
{
    test::require_ptrace();
    auto fixture = start_fixture();
    const pid_t pid = fixture.pid();
    REQUIRE(fixture.ask("load", 30s).starts_with("loaded "));
    std::uint64_t bias_untraced = 0;
    auto untraced = read_slots(pid, bias_untraced);
    REQUIRE(fixture.ask("unload", 30s) == "unloaded");

    attached_tdctl tdctl(pid);
    REQUIRE(fixture.ask("load", 60s).starts_with("loaded "));
    tdctl.wait_for([](const auto& r) { return is_routing(r, "routed"); }, "routing record");
    // The tracer is the guardian's child (cmd/guardian.hpp): killed, the
    // guardian restores the target from the shared journal.
    auto tracer = test::tracer_pid(pid);
    REQUIRE((tracer && *tracer > 0));
    REQUIRE(::kill(*tracer, SIGKILL) == 0);
    auto status = tdctl.wait_exit();
    MESSAGE("tdctl after its tracer was killed: " << status.describe() << "; " << tdctl.stderr_text());

    REQUIRE(test::wait_until([&] { return test::tracer_pid(pid) == std::optional<pid_t>(0); }, 10s));
    std::uint64_t bias_after = 0;
    auto after = read_slots(pid, bias_after);
    auto diff = slot_differences(untraced, bias_untraced, after, bias_after);
    CHECK_MESSAGE(diff.empty(), diff);
    // A trap byte left on the loader's r_brk would kill the fixture at its
    // next dlclose or dlopen.
    REQUIRE(fixture.ask("unload", 30s) == "unloaded");
    REQUIRE(fixture.ask("load", 30s).starts_with("loaded "));
    CHECK(fixture.ask("contend 1 5", 30s) == "contended 1");
    CHECK(fixture.ask("ping") == "pong");
}
