// Attaching to a running node process that keeps starting worker_threads.
// Node cannot tell us its workers' native TIDs, so the test watches
// /proc/NODE/task itself while tdctl runs: every TID tdctl reports must be a
// task the kernel really showed in that process, and a new one.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

// argv[2]: how many workers; one starts every 100 ms and lives ~50 ms.
constexpr const char* node_script = R"(const { Worker } = require('worker_threads');
const total = Number(process.argv[2]);
let started = 0, finished = 0, failures = 0;
process.stdout.write('ready ' + process.pid + '\n');
const timer = setInterval(() => {
  const w = new Worker('setTimeout(() => {}, 50)', { eval: true });
  w.on('error', () => { failures++; });
  w.on('exit', (code) => {
    if (code !== 0) failures++;
    if (++finished === total) process.stdout.write('done ' + finished + ' ' + failures + '\n');
  });
  if (++started === total) clearInterval(timer);
}, 100);
)";

/// Collects every TID that appears in /proc/PID/task, sampling every
/// millisecond on a thread of its own until stopped.
class task_sampler {
public:
    explicit task_sampler(pid_t pid)
        : pid_(pid), thread_([this](std::stop_token stop) {
              while (!stop.stop_requested()) {
                  auto tids = task_tids(pid_);
                  {
                      std::lock_guard lock(mutex_);
                      seen_.insert(tids.begin(), tids.end());
                  }
                  std::this_thread::sleep_for(1ms);
              }
          })
    {
    }
    std::set<pid_t> seen()
    {
        std::lock_guard lock(mutex_);
        return seen_;
    }
    void stop()
    {
        thread_.request_stop();
        if (thread_.joinable())
            thread_.join();
    }

private:
    pid_t pid_;
    std::mutex mutex_;
    std::set<pid_t> seen_;
    std::jthread thread_;
};

}  // namespace

TEST_SUITE("node")
{
    TEST_CASE("attach to node starting worker_threads: watch create --count 5, detach, node carries on")
    {
        require_attach();
        auto node = find_program("node");
        if (!node)
            node = find_program("nodejs");
        if (!node)
            skip_test("node is not installed");

        temp_file script("node-workers");
        std::ofstream(script.path()) << node_script;
        constexpr int workers = 40;
        auto target = child_process::spawn({*node, script.path(), std::to_string(workers)});
        auto ready = target.require_line(20s);
        REQUIRE(ready == fmt::format("ready {}", target.pid()));
        const pid_t pid = target.pid();

        task_sampler sampler(pid);
        const auto before = live_tids(pid);
        REQUIRE(!before.empty());

        auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e",
                                           "watch create --count 5"});
        // Each event line is checked as it arrives: its TID must be a task of
        // node right now (a worker lives for tens of ms after it is created)
        // or have been seen by the sampler.
        std::vector<json> records;
        std::set<pid_t> present_on_arrival;
        std::string lines_text;
        while (auto line = tdctl.read_line(30s)) {
            lines_text += *line + "\n";
            auto rec = json::parse(*line, nullptr, false);
            REQUIRE_MESSAGE(!rec.is_discarded(), "not JSON: " << *line);
            if (rec.value("type", "") == "event" && rec.contains("tid") && rec["tid"].is_number_integer()) {
                auto tid = rec["tid"].get<pid_t>();
                if (std::filesystem::exists(fmt::format("/proc/{}/task/{}", pid, tid)))
                    present_on_arrival.insert(tid);
            }
            records.push_back(std::move(rec));
        }
        auto status = tdctl.require_exit(30s);
        const auto after = live_tids(pid);
        sampler.stop();
        auto seen = sampler.seen();
        seen.insert(before.begin(), before.end());

        INFO("tdctl output:\n" << lines_text << "stderr: " << tdctl.stderr_text());
        CHECK(status.is_exited());
        CHECK(status.exit_code() == 0);
        CHECK(tracer_pid(pid) == 0);

        auto attached = records_of_type(records, "attached");
        REQUIRE(attached.size() == 1);
        CHECK(int_field(attached[0], "pid") == pid);
        CHECK(attached[0]["backend"] == "nptl");
        auto creates = event_records(records, "TD_CREATE");
        CHECK(creates.size() == 5);
        CHECK(records_of_type(records, "event").size() == creates.size());
        auto bad = malformed_thread_events(creates);
        CHECK_MESSAGE(bad.empty(), bad);
        for (const auto& c : creates) {
            auto tid = static_cast<pid_t>(int_field(c, "tid"));
            auto reporter = static_cast<pid_t>(int_field(c, "reporter"));
            CAPTURE(c.dump());
            CHECK_MESSAGE((seen.contains(tid) || present_on_arrival.contains(tid)),
                          "TID " << tid << " never was a task of node " << pid);
            CHECK_MESSAGE(seen.contains(reporter), "reporter " << reporter << " never was a task of node");
            CHECK(tid != reporter);
            // Threads alive before the attach and still alive at the end
            // existed all along; a creation cannot be about one of them.
            CHECK_FALSE((before.contains(tid) && after.contains(tid)));
        }
        auto ends = records_of_type(records, "watch_end");
        REQUIRE(ends.size() == 1);
        CHECK(ends[0]["reason"] == "count");
        CHECK(int_field(ends[0], "messages") == 5);
        CHECK(records_of_type(records, "detached").size() == 1);
        CHECK(records.back().value("type", "") == "detached");

        // Node was left alone: it finishes every worker and exits 0 itself.
        std::string done_line;
        while (auto line = target.read_line(30s)) {
            if (line->starts_with("done")) {
                done_line = *line;
                break;
            }
        }
        auto node_status = target.require_exit(20s);
        CHECK(done_line == fmt::format("done {} 0", workers));
        CHECK_MESSAGE(node_status.is_success(), node_status.describe() << "; stderr: " << target.stderr_text());
    }
}
