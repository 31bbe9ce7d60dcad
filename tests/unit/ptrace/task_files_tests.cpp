// task_files::read_each on this test process: every task's texts reach the
// call for that task (none for another's), once, whether read by the reader
// threads, by the calling thread past the descriptor bound, or afresh after a
// task ended.
#include <atomic>
#include <map>
#include <mutex>
#include <pthread.h>
#include <string>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <doctest/doctest.h>

#include "ptrace/task_files.hpp"

using namespace tdctl;
using file = procfs::task_files::file;

namespace {

// `count` threads named tf-0 … tf-N, parked until stop() or their own end.
class named_threads {
public:
    explicit named_threads(int count)
    {
        for (int i = 0; i < count; ++i)
            threads_.emplace_back([this, i] {
                std::string name = "tf-" + std::to_string(i);
                pthread_setname_np(pthread_self(), name.c_str());
                {
                    std::lock_guard lock(mutex_);
                    tids_[i] = tid_t{static_cast<pid_t>(::syscall(SYS_gettid))};
                }
                while (!stop_.load() && !ended(i))
                    ::usleep(1000);
            });
        while (ready() < count)
            ::usleep(1000);
    }
    ~named_threads()
    {
        stop_ = true;
        for (auto& t : threads_)
            if (t.joinable())
                t.join();
    }
    /// Ends thread i and waits for it.
    void end(int i)
    {
        {
            std::lock_guard lock(mutex_);
            ended_.push_back(i);
        }
        threads_[static_cast<std::size_t>(i)].join();
    }
    tid_t tid(int i)
    {
        std::lock_guard lock(mutex_);
        return tids_[i];
    }
    /// Every thread's TID in order, then one of no task.
    std::vector<tid_t> tids_and_a_stranger()
    {
        std::vector<tid_t> all;
        for (int i = 0; i < static_cast<int>(threads_.size()); ++i)
            all.push_back(tid(i));
        all.push_back(tid_t{0x3fffff});
        return all;
    }

private:
    int ready()
    {
        std::lock_guard lock(mutex_);
        return static_cast<int>(tids_.size());
    }
    bool ended(int i)
    {
        std::lock_guard lock(mutex_);
        for (int e : ended_)
            if (e == i)
                return true;
        return false;
    }
    std::mutex mutex_;
    std::map<int, tid_t> tids_;
    std::vector<int> ended_;
    std::atomic<bool> stop_{false};
    std::vector<std::thread> threads_;
};

// What the calls for one task saw. `use` may run on several threads at once
// for different tasks, so each call touches only its own task's entry: no
// doctest assertion there (doctest is not thread-safe), and a call count
// that stays exact if a task were ever passed twice at once.
struct task_seen {
    std::atomic<int> calls{0};
    std::size_t texts = 0;  ///< how many texts the first call got
    std::string comm;
    bool has_stat = false;
};

// Each task's entry, checked on the calling thread once read_each returned.
std::vector<task_seen> read_comm_and_stat(procfs::task_files& files, const std::vector<tid_t>& tids,
                                          std::size_t parallel_from)
{
    static constexpr file which[] = {file::comm, file::stat};
    std::vector<task_seen> seen(tids.size());
    files.read_each(tids, which, [&](std::size_t i, procfs::task_files::texts t) {
        task_seen& s = seen[i];
        if (s.calls.fetch_add(1) != 0)
            return;
        s.texts = t.size();
        s.comm = t.size() > 0 && t[0] ? *t[0] : "(gone)";
        s.has_stat = t.size() > 1 && t[1].has_value();
    }, parallel_from);
    for (std::size_t i = 0; i < seen.size(); ++i) {
        CAPTURE(i);
        if (seen[i].calls.load() != 0)
            REQUIRE(seen[i].texts == 2);
    }
    return seen;
}

}  // namespace

TEST_CASE("read_each: each task's files reach its own call, once, with readers, past the bound, and after an end")
{
    constexpr int n = 200;
    named_threads threads(n);
    const auto tids = threads.tids_and_a_stranger();
    const auto gone = tids.size() - 1;

    SUBCASE("readers, then the calling thread alone: the same answers")
    {
        procfs::task_files files(::getpid(), 4096);
        for (std::size_t parallel_from : {std::size_t{1}, std::size_t{1} << 30}) {
            CAPTURE(parallel_from);
            auto s = read_comm_and_stat(files, tids, parallel_from);
            for (int i = 0; i < n; ++i) {
                CAPTURE(i);
                CHECK(s[static_cast<std::size_t>(i)].calls.load() == 1);
                CHECK(s[static_cast<std::size_t>(i)].comm == "tf-" + std::to_string(i) + "\n");
                CHECK(s[static_cast<std::size_t>(i)].has_stat);
            }
            CHECK(s[gone].calls.load() == 1);
            CHECK(s[gone].comm == "(gone)");
            CHECK_FALSE(s[gone].has_stat);
        }
    }

    SUBCASE("a descriptor bound smaller than the tasks: the rest read by the calling thread")
    {
        procfs::task_files files(::getpid(), 61);  // 30 tasks' two files, and one more
        auto s = read_comm_and_stat(files, tids, 1);
        for (int i = 0; i < n; ++i) {
            CAPTURE(i);
            CHECK(s[static_cast<std::size_t>(i)].calls.load() == 1);
            CHECK(s[static_cast<std::size_t>(i)].comm == "tf-" + std::to_string(i) + "\n");
        }
        CHECK(s[gone].comm == "(gone)");
    }

    SUBCASE("tasks that ended after their files were opened are gone, the others read as before")
    {
        procfs::task_files files(::getpid(), 4096);
        (void)read_comm_and_stat(files, tids, 1);  // every descriptor open now
        for (int i = 0; i < n; i += 10)
            threads.end(i);
        auto s = read_comm_and_stat(files, tids, 1);
        for (int i = 0; i < n; ++i) {
            CAPTURE(i);
            CHECK(s[static_cast<std::size_t>(i)].calls.load() == 1);
            if (i % 10 == 0) {
                CHECK(s[static_cast<std::size_t>(i)].comm == "(gone)");
                CHECK_FALSE(s[static_cast<std::size_t>(i)].has_stat);
            } else {
                CHECK(s[static_cast<std::size_t>(i)].comm == "tf-" + std::to_string(i) + "\n");
            }
        }
    }
}

TEST_CASE("comms: every task's name without its newline, a kept final name, \"\" for a task that is gone")
{
    constexpr int n = 150;
    named_threads threads(n);
    const auto tids = threads.tids_and_a_stranger();
    procfs::task_files files(::getpid(), 4096);
    files.keep_final_comm(tids[7], "kept-name");
    auto names = files.comms(tids);
    REQUIRE(names.size() == tids.size());
    for (int i = 0; i < n; ++i) {
        CAPTURE(i);
        CHECK(names[static_cast<std::size_t>(i)] == (i == 7 ? std::string("kept-name") : "tf-" + std::to_string(i)));
    }
    CHECK(names.back().empty());
}

TEST_CASE("reader_count: at least one, at most four, never more than the CPUs this process may use")
{
    const unsigned r = procfs::task_files::reader_count();
    CHECK(r >= 1);
    CHECK(r <= 4);
    CHECK(r <= std::max(1u, std::thread::hardware_concurrency()));
}
