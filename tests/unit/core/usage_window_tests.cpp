// usage_window's names on this test process's own threads: the rows a time
// split shows (the first `named_rows` by on-CPU + run-queue time) carry the
// thread's name, and a thread that cannot rank among them, live or ended, is
// left unnamed (its comm file never read).
#include <algorithm>
#include <atomic>
#include <ctime>
#include <memory>
#include <pthread.h>
#include <queue>
#include <string>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <doctest/doctest.h>

#include "core/accounting/usage_window.hpp"

using namespace tdctl;
using core::counter_depth;
using core::usage_window;

namespace {

double thread_cpu_ms()
{
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// One thread named `name` that spins `spin_ms` of CPU when told to, then
// parks until it is let go.
class spinner {
public:
    spinner(std::string name, double spin_ms) : name_(std::move(name)), spin_ms_(spin_ms)
    {
        thread_ = std::thread([this] {
            pthread_setname_np(pthread_self(), name_.c_str());
            tid_ = static_cast<pid_t>(::syscall(SYS_gettid));
            while (!go_.load())
                ::usleep(200);
            const double until = thread_cpu_ms() + spin_ms_;
            while (thread_cpu_ms() < until) {
            }
            spun_ = true;
            while (!done_.load())
                ::usleep(500);
        });
        while (tid_.load() == 0)
            ::usleep(200);
    }
    ~spinner()
    {
        done_ = true;
        thread_.join();
    }
    tid_t tid() const { return tid_t{tid_.load()}; }
    const std::string& name() const { return name_; }
    // Spins now, one spinner at a time (each gets a CPU to itself).
    void spin()
    {
        go_ = true;
        while (!spun_.load())
            ::usleep(200);
    }

private:
    std::string name_;
    double spin_ms_;
    std::atomic<pid_t> tid_{0};
    std::atomic<bool> go_{false}, spun_{false}, done_{false};
    std::thread thread_;
};

// The rows of `w` in the order a time split shows them.
std::vector<const core::lwp_window_usage*> ranked(const core::window_usage& w)
{
    std::vector<const core::lwp_window_usage*> order;
    for (std::size_t i : core::split_rank_order(w))
        order.push_back(&w.lwps[i]);
    return order;
}

struct window_run {
    core::window_usage taken;
    std::vector<std::string> names;  // by TID: the names the threads set (index = position in `tids`)
    std::vector<tid_t> tids;
    std::size_t ended_named = 0;
};

// Two live threads (one spinning the most of all, one not at all) and
// `spins_ms.size()` threads that end, in that order, inside one window.
window_run run_window(std::size_t named_rows, const std::vector<double>& spins_ms)
{
    const pid_t pid = ::getpid();
    procfs::task_files files(pid, 64);
    spinner busiest("uw-live-busy", spins_ms.empty() ? 40 : *std::ranges::max_element(spins_ms) + 20);
    spinner idle("uw-live-idle", 0);
    std::vector<std::unique_ptr<spinner>> ending;
    for (std::size_t i = 0; i < spins_ms.size(); ++i)
        ending.push_back(std::make_unique<spinner>("uw-end-" + std::to_string(i), spins_ms[i]));
    const std::vector<tid_t> live = {tid_t{static_cast<pid_t>(::syscall(SYS_gettid))}, busiest.tid(), idle.tid()};
    usage_window window(files, counter_depth::times, live, named_rows);
    for (auto& s : ending)
        window.on_birth(s->tid());
    busiest.spin();
    idle.spin();
    for (auto& s : ending)
        s->spin();
    for (auto& s : ending)
        window.on_death(s->tid());
    window_run run;
    run.taken = window.take(live);
    run.tids = {busiest.tid(), idle.tid()};
    run.names = {busiest.name(), idle.name()};
    for (auto& s : ending) {
        run.tids.push_back(s->tid());
        run.names.push_back(s->name());
    }
    for (const auto& u : run.taken.lwps)
        if (u.ended && !u.name.empty())
            ++run.ended_named;
    return run;
}

// Every row ranked among the first `named_rows` has its thread's name, and
// every name given is the right one.
void check_names(const window_run& run, std::size_t named_rows)
{
    const auto order = ranked(run.taken);
    for (std::size_t k = 0; k < order.size(); ++k) {
        const auto& u = *order[k];
        CAPTURE(k);
        CAPTURE(u.tid.value);
        auto it = std::ranges::find(run.tids, u.tid);
        if (k < named_rows)
            CHECK_FALSE(u.name.empty());
        if (it != run.tids.end() && !u.name.empty())
            CHECK(u.name == run.names[static_cast<std::size_t>(it - run.tids.begin())]);
    }
}

}  // namespace

TEST_CASE("usage_window names the rows that can be shown and leaves the rest unnamed")
{
    constexpr std::size_t named_rows = 3;
    SUBCASE("threads ending with less and less time: after the first ranked ones, none can rank")
    {
        const std::vector<double> spins = {32, 28, 24, 20, 16, 12, 8, 4};
        auto run = run_window(named_rows, spins);
        REQUIRE(run.taken.lwps.size() == 3 + spins.size());
        check_names(run, named_rows);
        // The first `named_rows` to end are named; a later one only if its
        // measured time beat theirs. The spins decrease, but a run-queue wait
        // on a loaded host (or under a sanitizer) counts too and can reorder
        // them, so which ones could rank is taken from the measured times,
        // in the order the threads ended (take() lists them so).
        CHECK(run.ended_named >= named_rows);
        std::priority_queue<std::uint64_t, std::vector<std::uint64_t>, std::greater<>> best;
        std::size_t could_rank = 0;
        for (const auto& u : run.taken.lwps) {
            if (!u.ended)
                continue;
            const std::uint64_t t = core::runnable_ns(u);
            const bool ranks = best.size() < named_rows || t > best.top();
            if (ranks) {
                if (best.size() == named_rows)
                    best.pop();
                best.push(t);
                ++could_rank;
            }
            CAPTURE(u.tid.value);
            CAPTURE(t);
            CHECK(u.name.empty() != ranks);
        }
        CHECK(run.ended_named == could_rank);
        MESSAGE(run.ended_named, " of ", spins.size(), " ended threads could rank and were named");
        // The live thread that did nothing ranks last: not named.
        const auto order = ranked(run.taken);
        for (std::size_t k = named_rows; k < order.size(); ++k)
            if (!order[k]->ended)
                CHECK(order[k]->name.empty());
    }
    SUBCASE("threads ending with more and more time: each ranks when it ends")
    {
        const std::vector<double> spins = {4, 8, 12, 16, 20, 24};
        auto run = run_window(named_rows, spins);
        check_names(run, named_rows);
        CHECK(run.ended_named >= named_rows);
    }
    SUBCASE("all_named: every row is named")
    {
        auto run = run_window(usage_window::all_named, {10, 5, 2, 1, 0.5});
        for (const auto& u : run.taken.lwps) {
            CAPTURE(u.tid.value);
            CHECK_FALSE(u.name.empty());
        }
        check_names(run, run.taken.lwps.size());
    }
}
