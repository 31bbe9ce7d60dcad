// Targets that do awkward things (SPEC §4, §9 "The target never dies because
// of the controller"): fork and vfork, exec from a non-main thread, signals
// during thread creation, a thread name that breaks naive parsers, and a
// libc that was replaced or deleted on disk after it was mapped.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <sstream>
#include <set>

#include <unistd.h>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::vector<pid_t> tids_with_labels(const std::vector<record_fact>& facts, std::initializer_list<const char*> labels)
{
    std::vector<pid_t> out;
    for (const auto* label : labels) {
        auto some = thread_tids(facts, label);
        out.insert(out.end(), some.begin(), some.end());
    }
    return out;
}

/// A directory removed with everything in it when the owner goes away.
class temp_dir {
public:
    explicit temp_dir(std::string_view stem) : name_(stem)
    {
        fs::create_directories(name_.path());
    }
    ~temp_dir()
    {
        std::error_code ignored_because_best_effort;
        fs::remove_all(name_.path(), ignored_because_best_effort);
    }
    const std::string& path() const { return name_.path(); }

private:
    temp_file name_;
};

/// The libc this test process runs with (the system's).
std::string system_libc()
{
    for (const auto& m : proc_maps(::getpid()))
        if (m.offset == 0 && fs::path(m.path).filename() == "libc.so.6")
            return m.path;
    throw std::runtime_error("this test process has no libc.so.6 mapping");
}

}  // namespace

TEST_SUITE("hard cases")
{
    TEST_CASE("forker (fork, vfork): exit 0, children unharmed and untraced, events only for the parent's threads")
    {
        require_ptrace();
        temp_file record("forker-record");
        auto run = run_tdctl({"--json", "--", fixture_path("forker"), "--record", record.path()}, 60s);
        INFO(run.describe());
        auto facts = read_record(record.path());
        INFO("record: " << format_record(facts, 100));

        CHECK(run.result.status.exit_code() == 0);
        REQUIRE(count_kind(facts, "done") == 1);
        const pid_t pid = facts.front().id();
        auto forks = facts_of_kind(facts, "fork");
        auto child_exits = facts_of_kind(facts, "child-exit");
        CHECK(forks.size() == 4);
        REQUIRE(child_exits.size() == 4);
        for (const auto& c : child_exits) {
            CAPTURE(c.line);
            CHECK(c.number(1) == 0);
        }
        CHECK(count_kind(facts, "thread") >= 1 + 9);
        CHECK(thread_tids(facts, "child").size() == 9);

        auto parent_threads = to_multiset(tids_with_labels(facts, {"churner", "churn"}));
        auto creates = run.events("TD_CREATE");
        auto deaths = run.events("TD_DEATH");
        auto diff_create = multiset_difference(parent_threads, tid_multiset(creates));
        CHECK_MESSAGE(diff_create.empty(), "TD_CREATE vs the parent's threads: " << diff_create);
        auto diff_death = multiset_difference(parent_threads, tid_multiset(deaths));
        CHECK_MESSAGE(diff_death.empty(), "TD_DEATH vs the parent's threads: " << diff_death);
        auto bad = malformed_thread_events(creates) + malformed_thread_events(deaths);
        CHECK_MESSAGE(bad.empty(), bad);

        std::set<pid_t> child_ids;
        for (const auto& f : forks)
            child_ids.insert(f.id());
        for (pid_t tid : thread_tids(facts, "child"))
            child_ids.insert(tid);
        for (const auto& e : run.of_type("event")) {
            CAPTURE(e.dump());
            CHECK_FALSE(child_ids.contains(static_cast<pid_t>(int_field(e, "tid"))));
            CHECK_FALSE(child_ids.contains(static_cast<pid_t>(int_field(e, "reporter"))));
        }
        auto exits = run.of_type("exit");
        REQUIRE(exits.size() == 1);
        CHECK(int_field(exits[0], "pid") == pid);
        CHECK(int_field(exits[0], "status") == 0);
    }

    TEST_CASE("forker exec-thread: a non-main thread execs; events after the exec come from the new image")
    {
        require_ptrace();
        temp_file record("forker-exec-record");
        auto run = run_tdctl({"--json", "--", fixture_path("forker"), "--record", record.path(), "exec-thread"}, 60s);
        INFO(run.describe());
        auto facts = read_record(record.path());
        INFO("record: " << format_record(facts));

        CHECK(run.result.status.exit_code() == 0);
        REQUIRE(count_kind(facts, "done") == 1);
        auto starts = facts_of_kind(facts, "start");
        REQUIRE(starts.size() == 2);
        CHECK(starts[0].id() == starts[1].id());
        const pid_t pid = starts[0].id();
        auto exec_threads = thread_tids(facts, "exec");
        REQUIRE(exec_threads.size() == 1);
        auto stage2 = facts_of_kind(facts, "thread");
        stage2.erase(std::remove_if(stage2.begin(), stage2.end(), [](const auto& f) { return f.label() != "stage2"; }),
                     stage2.end());
        REQUIRE(stage2.size() == 3);

        // Split the output at the exec record.
        auto exec_at = std::find_if(run.records.begin(), run.records.end(),
                                    [](const json& r) { return r.value("type", "") == "exec"; });
        REQUIRE_MESSAGE(exec_at != run.records.end(), "no exec record");
        CHECK(int_field(*exec_at, "pid") == pid);
        CHECK(exec_at->value("backend", "") == "nptl");
        std::vector<json> before(run.records.begin(), exec_at), after(exec_at + 1, run.records.end());

        auto creates_before = event_records(before, "TD_CREATE");
        REQUIRE(creates_before.size() == 1);
        CHECK(int_field(creates_before[0], "tid") == exec_threads[0]);
        for (const auto& e : records_of_type(before, "event"))
            CHECK_MESSAGE(int_field(e, "tid") == exec_threads[0], e.dump());

        std::multiset<std::pair<pid_t, std::uint64_t>> expected;
        for (const auto& f : stage2)
            expected.emplace(f.id(), f.handle());
        for (const char* name : {"TD_CREATE", "TD_DEATH"}) {
            CAPTURE(name);
            std::multiset<std::pair<pid_t, std::uint64_t>> got;
            for (const auto& e : event_records(after, name))
                got.emplace(static_cast<pid_t>(int_field(e, "tid")), hex_field(e, "handle"));
            CHECK(got == expected);
        }
        auto bad = malformed_thread_events(records_of_type(run.records, "event"));
        CHECK_MESSAGE(bad.empty(), bad);
        auto exits = run.of_type("exit");
        REQUIRE(exits.size() == 1);
        CHECK(int_field(exits[0], "status") == 0);
    }

    TEST_CASE("signals 100 launched: every signal delivered, exact counts, exit 0")
    {
        require_ptrace();
        temp_file record("signals-record");
        auto run = run_tdctl({"--json", "--", fixture_path("signals"), "--record", record.path(), "100"}, 60s);
        INFO(run.describe());
        auto facts = read_record(record.path());
        INFO("record: " << format_record(facts));

        CHECK(run.result.status.exit_code() == 0);
        CHECK(count_kind(facts, "signal-sent") == 100);
        CHECK(count_kind(facts, "signal-got") == 100);
        CHECK(count_kind(facts, "done") == 1);
        auto threads = to_multiset(thread_tids(facts));
        auto diff_create = multiset_difference(threads, tid_multiset(run.events("TD_CREATE")));
        CHECK_MESSAGE(diff_create.empty(), "TD_CREATE: " << diff_create);
        auto diff_death = multiset_difference(threads, tid_multiset(run.events("TD_DEATH")));
        CHECK_MESSAGE(diff_death.empty(), "TD_DEATH: " << diff_death);
        auto exits = run.of_type("exit");
        REQUIRE(exits.size() == 1);
        CHECK(int_field(exits[0], "status") == 0);
    }

    TEST_CASE("named: the thread name 'a b) c' is listed exactly, in JSON and in text")
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
        INFO(text.describe());
        CHECK(text.result.status.exit_code() == 0);
        bool found = false;
        std::istringstream lines(text.result.out);
        for (std::string line; std::getline(lines, line);)
            if (line.find("a b) c") != std::string::npos && line.find(std::to_string(tid)) != std::string::npos &&
                line.find(fmt::format("{:#x}", named[0].handle())) != std::string::npos)
                found = true;
        CHECK_MESSAGE(found, "no line with the TID, the name 'a b) c' and the handle");
        CHECK(tracer_pid(pid) == 0);
    }

    TEST_CASE("libc replaced or deleted on disk after mapping: events work or a clear refusal, the target lives")
    {
        require_attach();
        const std::string libc_path = system_libc();
        for (const bool remove_file : {false, true}) {
            CAPTURE(remove_file);
            temp_dir dir("tdctl-libc");
            const std::string copy = dir.path() + "/libc.so.6";
            fs::copy_file(libc_path, copy);
            temp_file record("steer-record");
            spawn_options options;
            options.env = {{"LD_LIBRARY_PATH", dir.path()}};
            auto steer = child_process::spawn({fixture_path("steer"), "--record", record.path()}, options);
            const pid_t pid = steer.pid();
            REQUIRE(steer.ask("ping") == "pong");
            // Symbols from the system libc: the same bytes as the copy, which
            // is about to disappear.
            auto libc = find_module(pid, "libc.so.6", libc_path);
            REQUIRE(libc.mapped_path == copy);
            const auto create_addr = libc.address_of("__nptl_create_event");
            const auto original = read_proc_mem(pid, create_addr, 16);

            if (remove_file) {
                fs::remove(copy);
            } else {
                // A different file at the same path, atomically (rename), as a
                // package upgrade does.
                fs::copy_file("/bin/true", dir.path() + "/replacement");
                fs::rename(dir.path() + "/replacement", copy);
            }
            REQUIRE(find_module(pid, "libc.so.6", libc_path).mapped_path.ends_with("(deleted)"));

            auto tdctl = child_process::spawn(
                {tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "watch --for 2", "-e", "threads"});
            auto armed = [&] { return read_proc_mem(pid, create_addr, 16) != original; };
            bool watching = wait_until([&] { return armed() || tdctl.wait_exit(0ms).has_value(); }, 10s) && armed();
            std::optional<pid_t> spawned_tid;
            if (watching) {
                auto answer = steer.ask("spawn", 10s);
                std::istringstream words(answer);
                std::string word;
                int index = -1;
                pid_t tid = 0;
                words >> word >> index >> tid;
                REQUIRE_MESSAGE(word == "thread", answer);
                spawned_tid = tid;
            }
            auto status = tdctl.require_exit(30s);
            INFO("tdctl stdout:\n" << tdctl.stdout_text() << "stderr:\n" << tdctl.stderr_text());
            auto records = parse_records(tdctl.stdout_text());
            if (status.exit_code() == 0) {
                REQUIRE_MESSAGE(spawned_tid.has_value(), "tdctl exited 0 but never armed the TD_CREATE address");
                auto creates = event_records(records, "TD_CREATE");
                REQUIRE(creates.size() == 1);
                CHECK(int_field(creates[0], "tid") == *spawned_tid);
                std::set<pid_t> listed;
                for (const auto& t : records_of_type(records, "thread"))
                    listed.insert(static_cast<pid_t>(int_field(t, "tid")));
                CHECK(listed == live_tids(pid));
            } else {
                // A refusal must say so: exit 2 and an error record with a message.
                CHECK(status.exit_code() == 2);
                auto errors = records_of_type(records, "error");
                REQUIRE(!errors.empty());
                CHECK(errors[0].value("message", "").size() > 10);
            }

            // The target is fine and was put back.
            CHECK(tracer_pid(pid) == 0);
            CHECK(read_proc_mem(pid, create_addr, 16) == original);
            CHECK(steer.ask("ping") == "pong");
            auto later = steer.ask("spawn", 10s);
            CHECK(later.starts_with("thread "));
            CHECK(steer.ask("quit") == "bye");
            auto steer_status = steer.require_exit(10s);
            CHECK_MESSAGE(steer_status.is_success(), steer_status.describe() << "; " << steer.stderr_text());
        }
    }

    TEST_CASE("attach before a churn storm, watch until it exits: exact counts from the attach path")
    {
        require_attach();
        temp_file record("churn-attach-record");
        auto target = child_process::spawn({fixture_path("churn"), "--record", record.path(), "--wait-start", "8",
                                            "100"});
        const pid_t pid = target.pid();
        REQUIRE(target.require_line(10s) == fmt::format("ready {}", pid));
        auto libc = find_module(pid, "libc.so.6");
        const auto create_addr = libc.address_of("__nptl_create_event");
        const auto original = read_proc_mem(pid, create_addr, 16);

        auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "watch"});
        REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
        REQUIRE(wait_until([&] { return read_proc_mem(pid, create_addr, 16) != original; }, 10s));
        REQUIRE(target.write_stdin("x"));
        auto status = tdctl.require_exit(60s);
        auto target_status = target.require_exit(20s);
        INFO("tdctl stderr: " << tdctl.stderr_text());
        auto records = parse_records(tdctl.stdout_text());
        auto facts = read_record(record.path());
        INFO("record: " << format_record(facts));

        CHECK(status.exit_code() == 0);
        CHECK(target_status.is_success());
        const std::size_t expected = 8 * (1 + 100);
        REQUIRE(count_kind(facts, "thread") == expected);
        auto creates = event_records(records, "TD_CREATE");
        auto deaths = event_records(records, "TD_DEATH");
        CHECK(creates.size() == expected);
        CHECK(deaths.size() == expected);
        auto recorded = to_multiset(thread_tids(facts));
        auto diff_create = multiset_difference(recorded, tid_multiset(creates));
        CHECK_MESSAGE(diff_create.empty(), "TD_CREATE: " << diff_create);
        auto diff_death = multiset_difference(recorded, tid_multiset(deaths));
        CHECK_MESSAGE(diff_death.empty(), "TD_DEATH: " << diff_death);
        auto bad = malformed_thread_events(creates) + malformed_thread_events(deaths);
        CHECK_MESSAGE(bad.empty(), bad);
        auto exits = records_of_type(records, "exit");
        REQUIRE(exits.size() == 1);
        CHECK(int_field(exits[0], "status") == 0);
        auto ends = records_of_type(records, "watch_end");
        REQUIRE(ends.size() == 1);
        CHECK(ends[0]["reason"] == "exit");
    }
}
