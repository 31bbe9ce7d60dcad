// A target in a PID namespace of its own (`unshare --fork --pid --mount-proc`,
// as a container runtime starts one), attached from the host by its host PID.
// Its thread library records the namespace's TIDs (1, 2, 3, ...); tdctl must
// print, accept and write host TIDs everywhere, with the namespace TID as an
// extra field (from NSpid), names read through the host /proc, and events
// counted right. Checked against /proc (NSpid, comm) and the fixture's own
// record, which holds namespace TIDs (gettid() inside). Five rounds.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "tests/integration/integration_support.hpp"

using namespace tdctl::itest;
using namespace tdctl::test;
using namespace std::chrono_literals;

namespace {

constexpr int rounds = 5;

std::string trimmed(std::string s)
{
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
        s.pop_back();
    return s;
}

// Why `unshare --fork --pid --mount-proc` cannot run here, or nullopt.
std::optional<std::string> unshare_unavailable_reason()
{
    auto unshare = find_program("unshare");
    if (!unshare)
        return "unshare (util-linux) is not installed";
    auto r = run_command({*unshare, "--fork", "--pid", "--mount-proc", "true"}, 10s);
    if (!r.status.is_success())
        return fmt::format("unshare --fork --pid --mount-proc was refused ({}): {}", r.status.describe(),
                           trimmed(r.err));
    return std::nullopt;
}

// NSpid of one task, read straight from /proc: host TID first, the
// namespace's own last.
std::vector<pid_t> nspid(pid_t pid, pid_t tid)
{
    std::ifstream in(fmt::format("/proc/{}/task/{}/status", pid, tid));
    for (std::string line; std::getline(in, line);) {
        if (!line.starts_with("NSpid:"))
            continue;
        std::istringstream words(line.substr(6));
        std::vector<pid_t> out;
        for (pid_t v; words >> v;)
            out.push_back(v);
        return out;
    }
    return {};
}

// Host TID -> namespace TID of every task of pid.
std::map<pid_t, pid_t> namespace_tids(pid_t pid)
{
    std::map<pid_t, pid_t> out;
    for (pid_t t : task_tids(pid)) {
        auto ids = nspid(pid, t);
        REQUIRE_MESSAGE(ids.size() == 2, "NSpid of ", t, " has ", ids.size(), " entries");
        out[t] = ids.back();
    }
    return out;
}

// A fixture run by `unshare --fork --pid --mount-proc`: unshare forks, and
// the fixture, its child, is PID 1 of the new namespace. Its stdin and stdout
// are unshare's.
class namespaced_fixture {
public:
    explicit namespaced_fixture(std::vector<std::string> argv)
    {
        argv.insert(argv.begin(), {*find_program("unshare"), "--fork", "--pid", "--mount-proc"});
        unshare_.emplace(child_process::spawn(argv));
    }
    child_process& io() { return *unshare_; }

    /// The fixture's PID on the host: unshare's only child.
    pid_t host_pid()
    {
        if (host_pid_ != 0)
            return host_pid_;
        const pid_t u = unshare_->pid();
        auto path = fmt::format("/proc/{}/task/{}/children", u, u);
        bool found = wait_until(
            [&] {
                std::ifstream in(path);
                return static_cast<bool>(in >> host_pid_);
            },
            10s);
        REQUIRE_MESSAGE(found, "unshare (pid ", u, ") has no child after 10 s");
        auto ids = nspid(host_pid_, host_pid_);
        REQUIRE(ids.size() == 2);
        REQUIRE(ids.front() == host_pid_);
        REQUIRE(ids.back() == 1);
        return host_pid_;
    }

private:
    std::optional<child_process> unshare_;
    pid_t host_pid_ = 0;
};

// Every integer "tid" and "reporter" of the records: none may be a TID of
// the namespace that is not also a host TID of the target.
std::string foreign_tids(const std::vector<json>& records, const std::set<pid_t>& host)
{
    std::string bad;
    for (const auto& r : records)
        for (const char* field : {"tid", "reporter"})
            if (r.contains(field) && r[field].is_number_integer()) {
                pid_t v = r[field].get<pid_t>();
                if (v != 0 && !host.contains(v))
                    bad += fmt::format("{} {} in {}\n", field, v, r.dump());
            }
    return bad;
}

// Threads listed, masks, enable flags, rusage, lwpinfo and bt, by host TID.
void check_commands(int round)
{
    CAPTURE(round);
    temp_file record("ns-steer-record");
    namespaced_fixture steer({fixture_path("steer"), "--record", record.path()});
    REQUIRE(steer.io().ask("ping", 10s) == "pong");
    std::vector<steer_thread> spawned;
    for (int i = 0; i < 3; ++i)
        spawned.push_back(steer_spawn(steer.io()));
    REQUIRE(steer.io().ask("setname 1 ns-worker") == "named 1");
    const pid_t pid = steer.host_pid();

    // The kernel's account: host and namespace TIDs of every task; the
    // fixture's: its namespace TIDs and handles.
    const auto ns_of = namespace_tids(pid);
    REQUIRE(ns_of.size() == 4);
    std::map<pid_t, pid_t> host_of;
    for (const auto& [h, n] : ns_of)
        host_of[n] = h;
    std::set<pid_t> host;
    for (const auto& [h, n] : ns_of)
        host.insert(h);
    {
        std::istringstream answer(steer.io().ask("tids"));
        std::string word;
        answer >> word;
        std::set<pid_t> fixture_ns;
        for (pid_t t; answer >> t;)
            fixture_ns.insert(t);
        std::set<pid_t> kernel_ns;
        for (const auto& [h, n] : ns_of)
            kernel_ns.insert(n);
        REQUIRE(fixture_ns == kernel_ns);
        REQUIRE(fixture_ns.contains(1));
    }
    std::map<pid_t, std::uint64_t> handle_of_ns;   // from the record
    for (const auto& f : facts_of_kind(read_record(record.path()), "thread"))
        handle_of_ns[f.id()] = f.handle();
    REQUIRE(handle_of_ns.size() == 3);
    const pid_t worker = host_of.at(spawned[1].tid);   // named ns-worker
    const pid_t other = host_of.at(spawned[2].tid);
    const std::string w = std::to_string(worker);

    auto run = run_tdctl({"--json", "-p", std::to_string(pid), "-e", "threads", "-e", "event set create,death " + w,
                          "-e", "event enable on " + w, "-e", "event getmsg " + w, "-e", "threads", "-e",
                          "rusage start", "-e", "rusage collect " + w, "-e", "rusage collect all", "-e",
                          "lwpinfo " + w, "-e", "lwpinfo all", "-e", "bt " + w, "-e", "bt all"},
                         60s);
    INFO(run.describe());
    REQUIRE(run.result.status.exit_code() == 0);
    CHECK(run.of_type("error").empty());
    auto bad = foreign_tids(run.records, host);
    CHECK_MESSAGE(bad.empty(), "TIDs that are no host TID of the target:\n" << bad);

    auto attached = run.of_type("attached");
    REQUIRE(attached.size() == 1);
    CHECK(int_field(attached[0], "pid") == pid);
    auto processes = run.of_type("process");
    REQUIRE(processes.size() == 2);
    for (const auto& p : processes) {
        CHECK(int_field(p, "pid") == pid);
        CHECK(int_field(p, "ns_pid") == 1);
        CHECK(int_field(p, "threads") == 4);
    }

    // Two listings of four rows each: the first before, the second after the
    // worker's mask and flag were set.
    auto rows = run.of_type("thread");
    REQUIRE(rows.size() == 8);
    for (int listing = 0; listing < 2; ++listing) {
        CAPTURE(listing);
        std::set<pid_t> listed;
        for (int i = 0; i < 4; ++i) {
            const auto& r = rows[listing * 4 + i];
            const pid_t tid = static_cast<pid_t>(int_field(r, "tid"));
            CAPTURE(tid);
            listed.insert(tid);
            REQUIRE(ns_of.contains(tid));
            CHECK(int_field(r, "ns_tid") == ns_of.at(tid));
            CHECK(r["name"] == task_comm(pid, tid).value_or("?"));
            CHECK_FALSE(r["name"].get<std::string>().empty());
            CHECK(r["state"] == "active");
            if (tid == pid) {
                CHECK(i == 0);
            } else {
                CHECK(hex_field(r, "handle") == handle_of_ns.at(ns_of.at(tid)));
                CHECK(r["startsym"] == "steered_main");
            }
            const bool edited = listing == 1 && tid == worker;
            CHECK(r["traceme"] == edited);
            CHECK((r["events"] == "none") == !edited);
        }
        CHECK(listed == host);
    }
    for (const auto& r : rows)
        if (int_field(r, "tid") == worker)
            CHECK(r["name"] == "ns-worker");

    auto masks = run.of_type("mask");
    REQUIRE(masks.size() == 1);
    CHECK(int_field(masks[0], "tid") == worker);
    CHECK(masks[0]["scope"] == "thread");
    auto enables = run.of_type("enable");
    REQUIRE(enables.size() == 1);
    CHECK(int_field(enables[0], "tid") == worker);
    CHECK(enables[0]["traceme"] == true);
    auto getmsg = run.of_type("getmsg");
    REQUIRE(getmsg.size() == 1);
    CHECK(getmsg[0]["result"] == "TD_NOMSG");

    auto rusage = run.of_type("rusage");
    REQUIRE(rusage.size() == 5);   // the worker, then all four
    CHECK(int_field(rusage[0], "tid") == worker);
    CHECK(rusage[0]["name"] == "ns-worker");
    std::set<pid_t> rusage_all;
    for (std::size_t i = 1; i < rusage.size(); ++i)
        rusage_all.insert(static_cast<pid_t>(int_field(rusage[i], "tid")));
    CHECK(rusage_all == host);
    auto lwpinfo = run.of_type("lwpinfo");
    REQUIRE(lwpinfo.size() == 5);
    CHECK(int_field(lwpinfo[0], "tid") == worker);
    auto bts = run.of_type("backtrace");
    REQUIRE(bts.size() == 5);
    CHECK(int_field(bts[0], "tid") == worker);
    std::set<pid_t> bt_all;
    for (const auto& b : bts) {
        const pid_t tid = static_cast<pid_t>(int_field(b, "tid"));
        bt_all.insert(tid);
        if (tid == pid)
            continue;
        bool in_thread_main = false;
        for (const auto& f : b["frames"])
            in_thread_main = in_thread_main || f["function"] == "steered_main";
        CHECK_MESSAGE(in_thread_main, "no steered_main frame for ", tid, ": ", b.dump());
    }
    CHECK(bt_all == host);

    // Text: the host TID and the namespace TID on each row.
    auto text = run_tdctl({"-p", std::to_string(pid), "-e", "threads", "-e", "event set create " + std::to_string(other)},
                          30s);
    INFO(text.describe());
    REQUIRE(text.result.status.exit_code() == 0);
    for (const auto& [h, n] : ns_of) {
        std::string name = task_comm(pid, h).value_or("?");
        bool found = false;
        std::istringstream lines(text.result.out);
        for (std::string line; std::getline(lines, line);) {
            std::istringstream cols(line);
            std::string tid, ns_tid;
            cols >> tid >> ns_tid;
            found = found || (tid == std::to_string(h) && ns_tid == std::to_string(n) &&
                              line.find(" " + name + " ") != std::string::npos);
        }
        CHECK_MESSAGE(found, "no row '", h, " ", n, " ", name, "'");
    }
    CHECK(text.result.out.find(fmt::format("thread {} event mask: create", other)) != std::string::npos);

    CHECK(tracer_pid(pid) == 0);
    CHECK(steer.io().ask("ping") == "pong");
}

// watch on a thread storm: every creation and every death, each once, about
// the threads the fixture recorded, in host TIDs with their namespace TIDs.
void check_watch(int round)
{
    CAPTURE(round);
    constexpr int outer = 4, inner = 10;
    constexpr std::size_t expected = outer * (1 + inner);
    temp_file record("ns-churn-record");
    namespaced_fixture churn({fixture_path("churn"), "--record", record.path(), "--wait-start",
                              std::to_string(outer), std::to_string(inner)});
    REQUIRE(churn.io().require_line(10s) == "ready 1");
    const pid_t pid = churn.host_pid();

    // Armed: both reporting addresses planted and the global mask changed,
    // read past tdctl. Only then does the fixture start its threads.
    const auto regions = nptl_regions(pid, {});
    const auto before = take_snapshot(pid, regions);
    auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "watch --for 60"});
    REQUIRE(json::parse(tdctl.require_line(20s), nullptr, false).value("type", "") == "attached");
    auto armed = [&] {
        auto now = take_snapshot(pid, regions);
        return now.at("text __nptl_create_event") != before.at("text __nptl_create_event") &&
               now.at("text __nptl_death_event") != before.at("text __nptl_death_event") &&
               now.at("__nptl_threads_events") != before.at("__nptl_threads_events");
    };
    REQUIRE_MESSAGE(wait_until(armed, 10s), "the watch did not arm: "
                                                << snapshot_difference(before, take_snapshot(pid, regions)));
    REQUIRE(churn.io().write_stdin("x"));
    auto tdctl_status = tdctl.require_exit(60s);
    auto churn_status = churn.io().require_exit(20s);
    INFO("tdctl stdout:\n" << tdctl.stdout_text() << "stderr:\n" << tdctl.stderr_text());
    CHECK(tdctl_status.exit_code() == 0);
    CHECK(churn_status.is_success());

    auto facts = read_record(record.path());
    auto threads = facts_of_kind(facts, "thread");
    REQUIRE(threads.size() == expected);
    std::set<std::pair<pid_t, std::uint64_t>> recorded;   // namespace TID, handle
    for (const auto& f : threads)
        recorded.insert({f.id(), f.handle()});

    auto records = parse_records(tdctl.stdout_text());
    auto creates = event_records(records, "TD_CREATE");
    auto deaths = event_records(records, "TD_DEATH");
    CHECK(creates.size() == expected);
    CHECK(deaths.size() == expected);
    auto malformed = malformed_thread_events(creates) + malformed_thread_events(deaths);
    CHECK_MESSAGE(malformed.empty(), malformed);
    std::multiset<std::pair<pid_t, pid_t>> created, died;   // host TID, namespace TID
    std::string wrong;
    for (const auto* list : {&creates, &deaths})
        for (const auto& e : *list) {
            if (!e.contains("ns_tid") || !e["ns_tid"].is_number_integer()) {
                wrong += "no ns_tid: " + e.dump() + "\n";
                continue;
            }
            const pid_t tid = static_cast<pid_t>(int_field(e, "tid"));
            const pid_t ns_tid = static_cast<pid_t>(int_field(e, "ns_tid"));
            if (tid == ns_tid)
                wrong += "tid is the namespace TID: " + e.dump() + "\n";
            if (!recorded.contains({ns_tid, hex_field(e, "handle")}))
                wrong += "not a thread the fixture recorded: " + e.dump() + "\n";
            (list == &creates ? created : died).insert({tid, ns_tid});
        }
    CHECK_MESSAGE(wrong.empty(), wrong);
    CHECK(created == died);
    for (const auto& d : deaths)
        CHECK(int_field(d, "reporter") == int_field(d, "tid"));
    auto ends = records_of_type(records, "watch_end");
    REQUIRE(ends.size() == 1);
    CHECK(ends[0]["reason"] == "exit");
}

}  // namespace

TEST_CASE("PID namespace: threads, masks, enable, rusage, lwpinfo and bt in host TIDs, 5 rounds")
{
    require_attach();
    if (auto why = unshare_unavailable_reason())
        skip_test(*why);
    for (int round = 0; round < rounds; ++round)
        check_commands(round);
}

TEST_CASE("PID namespace: watch counts every creation and death, in host TIDs, 5 rounds")
{
    require_attach();
    if (auto why = unshare_unavailable_reason())
        skip_test(*why);
    for (int round = 0; round < rounds; ++round)
        check_watch(round);
}
