// Non-stop drain under a thread storm (SPEC §2.1 "Non-stop correctness", §9
// "Nothing lost"): `churn 8 200` launched under a session armed for
// TD_CREATE and TD_DEATH; eight threads create 200 threads each at once while
// others hit the reporting addresses. Every creation and every death must
// give exactly one message, about the thread the fixture itself recorded.
#include <doctest/doctest.h>

#include <chrono>
#include <map>

#include <sys/wait.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "core/session/session.hpp"
#include "events/event_names.hpp"
#include "tests/conformance/steer_driver.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::conformance;

namespace {

constexpr int outer = 8;
constexpr int inner = 200;
constexpr std::size_t expected_threads = outer * (1 + inner);   // 1608

using thread_key = std::pair<pid_t, std::uint64_t>;   // (tid, handle)

std::string describe_diff(const std::map<thread_key, int>& want, const std::map<thread_key, int>& got)
{
    std::string out;
    int shown = 0;
    for (const auto& [k, n] : want) {
        auto it = got.find(k);
        int g = it == got.end() ? 0 : it->second;
        if (g != n && shown++ < 10)
            out += fmt::format(" tid {} handle {:#x}: recorded {}, messages {};", k.first, k.second, n, g);
    }
    for (const auto& [k, n] : got)
        if (!want.contains(k) && shown++ < 20)
            out += fmt::format(" tid {} handle {:#x}: not recorded, messages {};", k.first, k.second, n);
    return out.empty() ? " (none)" : out;
}

void run_once(int round)
{
    INFO("round ", round);
    test::temp_file record("tdctl-conformance-churn");
    ptrace::launch_options opts;
    opts.argv = {test::fixture_path("churn"), "--record", record.path(), std::to_string(outer), std::to_string(inner)};
    auto s = core::session::launch(opts);
    REQUIRE_MESSAGE(s->target().agent() != nullptr, "no thread agent: ", s->target().no_agent_reason());
    auto armed = s->arm({TD_CREATE, TD_DEATH});
    REQUIRE_MESSAGE(armed.has_value(), "arm: ", td_name(armed.error()));
    s->resume();

    std::map<thread_key, int> creates, deaths;
    std::size_t create_count = 0, death_count = 0, synthesized = 0, bad_data = 0;
    std::optional<int> exit_raw;
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!exit_raw) {
        REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline,
                        "churn did not finish within 60 s; messages so far: ", create_count, " creates, ",
                        death_count, " deaths");
        for (const auto& ev : s->pump(100)) {
            if (ev.what == core::session_event::kind::process_exited) {
                exit_raw = ev.status;
                continue;
            }
            REQUIRE(ev.what == core::session_event::kind::message);
            const auto& m = ev.message;
            thread_key key{m.tid.value, m.handle.value};
            if (m.data != m.handle.value)
                ++bad_data;
            if (m.event == TD_CREATE) {
                ++create_count;
                ++creates[key];
            } else if (m.event == TD_DEATH) {
                ++death_count;
                ++deaths[key];
                if (!m.origin.empty())
                    ++synthesized;
            } else {
                FAIL("unexpected event ", events::event_name(m.event));
            }
        }
    }
    REQUIRE_MESSAGE((WIFEXITED(*exit_raw) && WEXITSTATUS(*exit_raw) == 0), "churn ended with raw status ", *exit_raw);

    auto facts = test::read_record(record.path());
    std::map<thread_key, int> recorded;
    for (const auto& f : test::facts_of_kind(facts, "thread"))
        ++recorded[{f.id(), f.handle()}];
    REQUIRE(test::count_kind(facts, "thread") == expected_threads);
    REQUIRE(test::count_kind(facts, "done") == 1);

    CHECK(create_count == expected_threads);
    CHECK(death_count == expected_threads);
    CHECK_MESSAGE(creates == recorded, "TD_CREATE messages differ from the record:", describe_diff(recorded, creates));
    CHECK_MESSAGE(deaths == recorded, "TD_DEATH messages differ from the record:", describe_diff(recorded, deaths));
    CHECK_MESSAGE(bad_data == 0, bad_data, " messages whose data is not the thread's handle");
    // Every churn thread returns normally, so each death comes through the
    // reporting address, none from the controller's exit-stop fallback.
    CHECK_MESSAGE(synthesized == 0, synthesized, " deaths were synthesized at LWP exit");
}

}  // namespace

TEST_CASE("non-stop drain: churn 8 200 gives exactly one TD_CREATE and one TD_DEATH per thread, three times")
{
    test::require_ptrace();
    for (int round = 0; round < 3; ++round)
        run_once(round);
}
