// `locks` end to end: the e2e_locks fixture (4 threads, 2 mutexes, known
// holders and hold times) runs under `tdctl --agent --json -e 'locks ...'`,
// and each lock record is compared with the fixture's own record: the
// contentions exactly, the holders and waiters exactly, the total wait
// within 10 % of the waiters' own clock_gettime measurement around their
// lock calls (each lock event stops the waiter for a moment, inside the
// fixture's measurement; holds of 60 and 90 ms keep that small), the call
// sites naming the fixture's functions, and each record's shape. The
// e2e_trylock fixture (N pthread_mutex_trylock failures on a held mutex, then
// contentions) runs launched with --agent and with the agent loaded by
// attach: `locks` must count exactly its N failures, and every call site
// must start with the fixture's own call into pthread (no agent frame).
// On /usr/bin/python3: a contended threading.Lock (a semaphore the agent
// knows as a lock) in `locks`, and a two-Lock inversion in `deadlock`.
//
// Timing: the 10 % is the acceptance bound; under heavy load a stop can
// take milliseconds, so the holds are long to keep the test from flaking.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "tests/agent_e2e/agent_e2e_support.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using namespace tdctl::agent_e2e;

namespace {
constexpr const char* python3 = "/usr/bin/python3";
}  // namespace

namespace {

/// What the fixture says about one of its locks.
struct recorded_lock {
    std::uint64_t address = 0;
    long contended = 0;
    long long wait_ns = 0;
    std::map<pid_t, std::uint64_t> holders;   ///< holder TID -> waits it caused
    std::map<pid_t, std::uint64_t> waiters;   ///< waiter TID -> contended acquisitions
};

/// The e2e_locks record: "lock", "wait", "total" lines by lock name.
std::map<std::string, recorded_lock> read_lock_record(const std::string& path, bool& done)
{
    std::map<std::string, recorded_lock> locks;
    auto text = test::read_text_file(path);
    REQUIRE(text.has_value());
    std::istringstream in(*text);
    std::string line;
    done = false;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string kind, name;
        words >> kind;
        if (kind == "done")
            done = true;
        if (kind != "lock" && kind != "wait" && kind != "total")
            continue;
        words >> name;
        auto& l = locks[name];
        if (kind == "lock") {
            std::string addr;
            words >> addr;
            l.address = parse_number(addr);
        } else if (kind == "wait") {
            pid_t waiter = 0, holder = 0;
            words >> waiter >> holder;
            ++l.waiters[waiter];
            ++l.holders[holder];
        } else {
            words >> l.contended >> l.wait_ns;
        }
    }
    return locks;
}

std::map<pid_t, std::uint64_t> tid_counts(const nlohmann::json& list)
{
    std::map<pid_t, std::uint64_t> out;
    for (const auto& e : list)
        out[e.at("tid").get<pid_t>()] = e.at("contentions").get<std::uint64_t>();
    return out;
}

/// Every key of a "lock" record, with its JSON type.
void check_lock_record_shape(const nlohmann::json& r)
{
    INFO(r.dump());
    for (const char* key : {"address", "symbol", "module", "kind"})
        CHECK(r.at(key).is_string());
    for (const char* key : {"report", "rank", "contentions", "waits", "pri_inherit", "call_site_count"})
        CHECK(r.at(key).is_number_unsigned());
    for (const char* key : {"wait_total", "wait_avg", "wait_max", "time"})
        CHECK(r.at(key).is_number());
    for (const char* key : {"holders", "waiters", "call_sites"})
        CHECK(r.at(key).is_array());
    CHECK(r.at("address").get<std::string>().starts_with("0x"));
    for (const auto& site : r.at("call_sites")) {
        CHECK(site.at("contentions").is_number_unsigned());
        CHECK(site.at("wait").is_number());
        REQUIRE(site.at("frames").is_array());
        for (const auto& f : site.at("frames")) {
            CHECK(f.at("pc").is_string());
            CHECK(f.contains("function"));
            CHECK(f.contains("module"));
        }
    }
}

/// The functions of a lock record's call sites, all frames.
std::vector<std::string> site_functions(const nlohmann::json& r)
{
    std::vector<std::string> names;
    for (const auto& site : r.at("call_sites"))
        for (const auto& f : site.at("frames"))
            if (f.at("function").is_string())
                names.push_back(f.at("function").get<std::string>());
    return names;
}

}  // namespace

// Stopped at each report, and --stream: from the agent's rings, no waiter
// stopped, each call site one frame (contend_lock).
TEST_CASE("locks (--stop and the default stream): per-lock contentions, holders, waits and call sites match the fixture's record")
{
    test::require_ptrace();
    for (const bool stream : {false, true}) {
        CAPTURE(stream);
        test::temp_file record("tdctl-locks-record");
        auto run = run_tdctl_agent({stream ? "locks --for 60" : "locks --for 60 --stop"},
                                   {fixture_path("e2e_locks"), "--record", record.path()}, 120s);
        INFO(describe_run(run));
        REQUIRE(run.result.status.is_success());
        REQUIRE(run.exit.has_value());
        CHECK(run.exit->value("status", -1) == 0);
        bool done = false;
        auto recorded = read_lock_record(record.path(), done);
        REQUIRE(done);
        REQUIRE(recorded.size() == 2);

        auto reports = run.of_type("locks_report");
        REQUIRE(reports.size() == 1);
        CHECK(reports[0].at("unseen").is_null());   // a C program: no locks of its own kind
        auto locks = run.of_type("lock");
        CHECK(reports[0].value("locks", 0u) == locks.size());
        std::map<std::uint64_t, nlohmann::json> by_address;
        for (const auto& r : locks) {
            check_lock_record_shape(r);
            by_address[parse_number(r.at("address").get<std::string>())] = r;
        }
        // Most total wait first.
        for (std::size_t i = 1; i < locks.size(); ++i)
            CHECK(locks[i - 1].at("wait_total").get<double>() >= locks[i].at("wait_total").get<double>());

        for (const auto& [name, want] : recorded) {
            INFO("lock ", name);
            REQUIRE(by_address.contains(want.address));
            const auto& got = by_address[want.address];
            CHECK(got.at("symbol").get<std::string>() == name);
            CHECK(got.at("kind").get<std::string>() == "mutex");
            CHECK(got.at("contentions").get<long>() == want.contended);
            CHECK(got.at("waits").get<long>() == want.contended);
            CHECK(tid_counts(got.at("holders")) == want.holders);
            CHECK(tid_counts(got.at("waiters")) == want.waiters);
            const double mine = got.at("wait_total").get<double>();
            const double theirs = static_cast<double>(want.wait_ns) / 1e9;
            MESSAGE(fmt::format("{}: tdctl's total wait {:.6f} s, the fixture's {:.6f} s ({:+.2f} %)", name, mine,
                                theirs, 100.0 * (mine - theirs) / theirs));
            CHECK(std::fabs(mine - theirs) <= 0.10 * theirs);
            CHECK(got.at("wait_max").get<double>() <= mine);
            auto functions = site_functions(got);
            INFO(fmt::format("call site functions: {}", fmt::join(functions, ", ")));
            CHECK(std::find(functions.begin(), functions.end(), "contend_lock") != functions.end());
            if (stream)
                CHECK(functions == std::vector<std::string>{"contend_lock"});
            else
                CHECK(std::find(functions.begin(), functions.end(), "pair_worker") != functions.end());
            // The agent's own frames are not the waiters' call sites.
            for (const auto& f : functions)
                CHECK_FALSE(f.starts_with("__tdagent_event"));
        }
    }
}

TEST_CASE("locks --interval: one report per interval, their contentions add up to the fixture's")
{
    test::require_ptrace();
    test::temp_file record("tdctl-locks-interval");
    // The fixture's holds take about 0.29 s (3 rounds x 2 x 40 ms, both pairs
    // at once); an interval of 0.3 s gave one report when the run was quick.
    auto run = run_tdctl_agent({"locks --interval 0.1 --top 1"},
                               {fixture_path("e2e_locks"), "--record", record.path(), "3", "40", "40"}, 120s);
    INFO(describe_run(run));
    REQUIRE(run.result.status.is_success());
    bool done = false;
    auto recorded = read_lock_record(record.path(), done);
    REQUIRE(done);
    auto reports = run.of_type("locks_report");
    CHECK(reports.size() >= 2);
    std::uint64_t total = 0;
    for (const auto& r : reports) {
        total += r.value("contentions", std::uint64_t{0});
        CHECK(r.value("shown", 0u) <= 1u);
    }
    long want = 0;
    for (const auto& [name, l] : recorded)
        want += l.contended;
    CHECK(total == static_cast<std::uint64_t>(want));
}

TEST_CASE("locks without the agent's lock events is refused with the reason")
{
    test::require_ptrace();
    test::temp_file out("tdctl-locks-nptl");
    auto result = test::run_command({test::tdctl_path(), "--json", "-o", out.path(), "-e", "locks --for 1", "--",
                                     fixture_path("e2e_locks"), "1", "1", "1"},
                                    60s);
    INFO(result.describe());
    auto text = test::read_text_file(out.path());
    REQUIRE(text.has_value());
    CHECK(text->find("TD_NOEVENT") != std::string::npos);
    CHECK(text->find("--agent") != std::string::npos);
    CHECK_FALSE(result.status.is_success());
}

namespace {

/// What e2e_trylock says about its locks.
struct trylock_record {
    std::map<std::string, std::uint64_t> address;  ///< lock name -> address
    std::map<std::string, pid_t> holder;           ///< lock name -> the holder of its contended wait
    long failures = 0;                             ///< EBUSY returns on try_lock
    long successes = 0;
    std::map<std::string, long> waits;             ///< lock name -> contended acquisitions
    bool ready = false;
    bool done = false;
};

trylock_record read_trylock_record(const std::string& path)
{
    trylock_record r;
    auto text = test::read_text_file(path);
    if (!text)
        return r;
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string kind, name;
        words >> kind >> name;
        if (kind == "ready")
            r.ready = true;
        else if (kind == "done")
            r.done = true;
        else if (kind == "lock") {
            std::string addr;
            words >> addr;
            r.address[name] = parse_number(addr);
        } else if (kind == "trylock")
            words >> r.failures >> r.successes;
        else if (kind == "wait") {
            ++r.waits[name];
            pid_t waiter = 0, holder = 0;
            words >> waiter >> holder;
            r.holder[name] = holder;
        }
    }
    return r;
}

/// `locks` of an e2e_trylock run against its record: try_lock's trylock
/// failures exactly, each lock's contentions, and every call site starting
/// with the fixture's contend_lock (file and module its own), then its
/// callers, `depth` frames in all.
/// The TIDs of a lock record's holders or waiters.
std::set<pid_t> tids_of(const nlohmann::json& counts)
{
    std::set<pid_t> tids;
    for (const auto& c : counts)
        tids.insert(c.at("tid").get<pid_t>());
    return tids;
}

void check_trylock_run(const tdctl_run& run, const trylock_record& want, long failures, std::size_t depth)
{
    REQUIRE(want.done);
    CHECK(want.failures == failures);
    auto reports = run.of_type("locks_report");
    REQUIRE(reports.size() == 1);
    CHECK(reports[0].value("try_failures", -1L) == want.failures);
    std::map<std::uint64_t, nlohmann::json> by_address;
    for (const auto& r : run.of_type("lock")) {
        check_lock_record_shape(r);
        CHECK(r.at("try_failures").is_number_unsigned());
        by_address[parse_number(r.at("address").get<std::string>())] = r;
    }
    for (const auto& [name, address] : want.address) {
        INFO("lock ", name);
        REQUIRE(by_address.contains(address));
        const auto& got = by_address[address];
        CHECK(got.at("symbol").get<std::string>() == name);
        CHECK(got.at("try_failures").get<long>() == (name == "try_lock" ? want.failures : 0L));
        CHECK(got.at("contentions").get<long>() == want.waits.at(name));
        CHECK(got.at("waits").get<long>() == want.waits.at(name));
        REQUIRE(got.at("call_sites").size() == 1);
        const auto& frames = got.at("call_sites")[0].at("frames");
        INFO(frames.dump());
        REQUIRE(frames.size() == depth);
        // The program's call into pthread first: no frame of the agent's.
        CHECK(frames[0].at("function") == "contend_lock");
        CHECK(frames[0].at("file") == "e2e_trylock.c");
        CHECK(frames[0].at("module") == "e2e_trylock");
        if (depth >= 3) {
            CHECK(frames[1].at("function") == "contend");
            CHECK(frames[2].at("function") == "tryer");
        }
    }
}

}  // namespace

TEST_CASE("locks counts trylock failures per lock; call sites start in the program (launch with --agent)")
{
    test::require_ptrace();
    test::temp_file record("tdctl-trylock-record");
    auto run = run_tdctl_agent({"locks --for 60 --bt=3"}, {fixture_path("e2e_trylock"), "--record", record.path(), "37", "5"},
                               120s);
    INFO(describe_run(run));
    REQUIRE(run.result.status.is_success());
    REQUIRE(run.exit.has_value());
    CHECK(run.exit->value("status", -1) == 0);
    auto want = read_trylock_record(record.path());
    CHECK(want.successes == 5);
    check_trylock_run(run, want, 37, 3);
}

// --stream: the same counts from the agent's rings, no waiter stopped; each
// wait's call site is its one frame, and the holder is the owner the agent
// read when the wait began.
TEST_CASE("locks --stream: the same counts, holders and call sites from the rings (launch and -p PID --agent)")
{
    test::require_ptrace();
    auto check_holders = [](const tdctl_run& run, const trylock_record& want) {
        for (const auto& r : run.of_type("lock")) {
            const std::uint64_t address = parse_number(r.at("address").get<std::string>());
            for (const auto& [name, at] : want.address) {
                if (at != address)
                    continue;
                INFO("lock ", name, ": ", r.dump());
                CHECK(tids_of(r.at("holders")) == std::set<pid_t>{want.holder.at(name)});
                CHECK(r.at("kind") == "mutex");
            }
        }
    };
    {
        test::temp_file record("tdctl-trylock-stream");
        auto run = run_tdctl_agent({"locks --for 60 --stream"},
                                   {fixture_path("e2e_trylock"), "--record", record.path(), "41", "3"}, 120s);
        INFO(describe_run(run));
        REQUIRE(run.result.status.is_success());
        auto want = read_trylock_record(record.path());
        check_trylock_run(run, want, 41, 1);
        check_holders(run, want);
    }
    {
        test::temp_file record("tdctl-trylock-stream-attach");
        auto target = test::child_process::spawn(
            {fixture_path("e2e_trylock"), "--record", record.path(), "--wait-armed", "19", "2"});
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        while (!read_trylock_record(record.path()).ready && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(10ms);
        REQUIRE(read_trylock_record(record.path()).ready);
        auto run = run_tdctl_agent_attached({"locks --for 60 --stream"}, target.pid(), 120s);
        INFO(describe_run(run));
        REQUIRE(run.result.status.is_success());
        CHECK(target.require_exit(30s).is_success());
        auto want = read_trylock_record(record.path());
        check_trylock_run(run, want, 19, 1);
        check_holders(run, want);
    }
}

TEST_CASE("locks --stream is refused with --bt, and without the agent's rings")
{
    test::require_ptrace();
    test::temp_file record("tdctl-trylock-stream-refused");
    auto run = run_tdctl_agent({"locks --stream --bt=4 --for 1"},
                               {fixture_path("e2e_trylock"), "--record", record.path()});
    CHECK_FALSE(run.result.status.is_success());
    CHECK(run.result.err.find("locks --stream: --bt needs each waiter to stop") != std::string::npos);
}

TEST_CASE("locks counts trylock failures with the agent loaded by attach (-p PID --agent)")
{
    test::require_ptrace();
    test::temp_file record("tdctl-trylock-attach");
    auto target = test::child_process::spawn({fixture_path("e2e_trylock"), "--record", record.path(), "--wait-armed", "23", "4"});
    // Attach once the program is past its start-up (the loader consistent).
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!read_trylock_record(record.path()).ready && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    REQUIRE(read_trylock_record(record.path()).ready);
    auto run = run_tdctl_agent_attached({"locks --for 60 --bt=1"}, target.pid(), 120s);
    INFO(describe_run(run));
    REQUIRE(run.result.status.is_success());
    auto status = target.require_exit(30s);
    CHECK(status.is_success());
    auto want = read_trylock_record(record.path());
    CHECK(want.successes == 4);
    check_trylock_run(run, want, 23, 1);
}

namespace {

bool python3_missing()
{
    if (::access(python3, X_OK) == 0)
        return false;
    MESSAGE(python3, " is not installed: nothing to check");
    return true;
}

// "worker TID" lines of a CPython script's record, and others by first word.
std::map<std::string, std::vector<std::vector<std::string>>> read_python_record(const std::string& path)
{
    std::map<std::string, std::vector<std::vector<std::string>>> lines;
    auto text = test::read_text_file(path);
    REQUIRE(text.has_value());
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::vector<std::string> w;
        for (std::string x; words >> x;)
            w.push_back(x);
        if (!w.empty())
            lines[w[0]].push_back(w);
    }
    return lines;
}

bool has_function(const nlohmann::json& frames, std::string_view name)
{
    for (const auto& f : frames)
        if (f.contains("function") && f.at("function").is_string() && f.at("function").get<std::string>() == name)
            return true;
    return false;
}

}  // namespace

TEST_CASE("locks on CPython: a contended threading.Lock is a semaphore lock with its waiters, inferred holders "
          "and the interpreter's call site")
{
    test::require_ptrace();
    if (python3_missing())
        return;
    // Four workers take one Lock in turn; each switch of the GIL while one
    // holds it makes another wait in sem_wait (CPython's Lock is sem_init(1)).
    constexpr const char* script = R"(import sys, threading, time
rec = open(sys.argv[1], 'w', buffering=1)
l = threading.Lock()
def work():
    rec.write(f"worker {threading.get_native_id()}\n")
    end = time.time() + 0.5
    while time.time() < end:
        with l:
            sum(range(2000))
ts = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
)";
    for (const char* command : {"locks --for 30 --stop", "locks --for 30"}) {
        CAPTURE(command);
        test::temp_file record("tdctl-locks-python");
        auto run = run_tdctl_agent({command}, {python3, "-c", script, record.path()}, 120s);
        INFO(describe_run(run));
        REQUIRE(run.result.status.is_success());
        std::set<pid_t> workers;
        auto facts = read_python_record(record.path());
        for (const auto& w : facts["worker"])
            workers.insert(std::stoi(w.at(1)));
        REQUIRE(workers.size() == 4);
        auto reports = run.of_type("locks_report");
        REQUIRE(reports.size() == 1);
        REQUIRE(reports[0].at("unseen").is_string());
        CHECK(reports[0].at("unseen").get<std::string>().find("CPython") != std::string::npos);
        // The workers' Lock: the semaphore most of them wait on.
        const auto lock_records = run.of_type("lock");
        const nlohmann::json* lock = nullptr;
        for (const auto& rec : lock_records)
            if (rec.at("kind") == "semaphore" && (lock == nullptr || rec.at("contentions") > lock->at("contentions")))
                lock = &rec;
        REQUIRE(lock != nullptr);
        INFO(lock->dump());
        CHECK(lock->at("contentions").get<long>() > 0);
        CHECK(lock->at("holders_inferred") == true);
        const auto waiters = tids_of(lock->at("waiters"));
        const auto holders = tids_of(lock->at("holders"));
        CHECK(waiters.size() >= 2);
        CHECK(std::includes(workers.begin(), workers.end(), waiters.begin(), waiters.end()));
        CHECK(!holders.empty());
        CHECK(std::includes(workers.begin(), workers.end(), holders.begin(), holders.end()));
        // Its call site starts in the interpreter's lock call, below the agent's frames.
        REQUIRE(!lock->at("call_sites").empty());
        const auto& frames = lock->at("call_sites")[0].at("frames");
        REQUIRE(!frames.empty());
        CHECK(frames[0].value("function", "") == "PyThread_acquire_lock_timed");
    }
}

TEST_CASE("deadlock on CPython: two threads taking two Locks in opposite orders are a cycle, holders inferred")
{
    test::require_ptrace();
    if (python3_missing())
        return;
    constexpr const char* script = R"(import sys, threading
rec = open(sys.argv[1], 'w', buffering=1)
a = threading.Lock()
b = threading.Lock()
both = threading.Barrier(2)
def take(first, second, names):
    with first:
        rec.write(f"holds {threading.get_native_id()} {names[0]}\n")
        both.wait()
        rec.write(f"wants {threading.get_native_id()} {names[1]}\n")
        with second:
            pass
t1 = threading.Thread(target=take, args=(a, b, ("a", "b")))
t2 = threading.Thread(target=take, args=(b, a, ("b", "a")))
t1.start(); t2.start()
t1.join()
)";
    test::temp_file record("tdctl-deadlock-python");
    auto run = run_tdctl_agent({"sleep 3", "deadlock", "kill"}, {python3, "-c", script, record.path()}, 120s);
    INFO(describe_run(run));
    auto facts = read_python_record(record.path());
    REQUIRE(facts["wants"].size() == 2);   // both threads were on their way into the second Lock
    std::set<pid_t> stuck;
    for (const auto& w : facts["wants"])
        stuck.insert(std::stoi(w.at(1)));
    auto recs = run.of_type("deadlock");
    REQUIRE(recs.size() == 1);
    const auto& rec = recs[0];
    CHECK(rec.at("found") == true);
    CHECK(rec.at("semaphore_waits").get<long>() >= 2);
    REQUIRE(rec.at("cycles").size() == 1);
    std::set<pid_t> members;
    for (const auto& m : rec.at("cycles")[0]) {
        members.insert(m.at("tid").get<pid_t>());
        CHECK(m.at("wants").at("kind") == "semaphore");
        CHECK(m.at("holds").at("kind") == "semaphore");
        CHECK(has_function(m.at("frames"), "PyThread_acquire_lock_timed"));
    }
    CHECK(members == stuck);
    for (const auto& w : rec.at("waits"))
        if (stuck.contains(w.at("tid").get<pid_t>())) {
            CHECK(w.at("owner_inferred") == true);
            CHECK(stuck.contains(w.at("owner").get<pid_t>()));
        }
}
