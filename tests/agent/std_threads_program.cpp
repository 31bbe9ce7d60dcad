// A C++ program that knows nothing about libtdagent: std::thread,
// std::mutex and std::condition_variable under forced contention. Run with
// the agent preloaded, the standard library's calls (pthread_create,
// pthread_mutex_lock, pthread_cond_wait, pthread_join) must go through it.
//
// Contention is made certain, not likely: the main thread holds the mutex
// until every worker is asleep on it (state S in /proc/self/task/TID/stat,
// and nothing else puts a worker to sleep at that point).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

constexpr int workers = 4;

char task_state(pid_t tid)
{
    std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto close = text.rfind(')');
    return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : '?';
}

bool wait_asleep(const std::vector<std::atomic<pid_t>>& tids)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
        bool all = true;
        for (const auto& t : tids)
            all = all && t.load() != 0 && task_state(t.load()) == 'S';
        if (all)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
}

}  // namespace

int main()
{
    std::mutex m;
    std::condition_variable cv;
    int arrived = 0;
    bool go = false;
    std::vector<std::atomic<pid_t>> tids(workers);

    std::unique_lock<std::mutex> held(m);
    std::vector<std::thread> threads;
    for (int i = 0; i < workers; ++i) {
        threads.emplace_back([&, i] {
            tids[i] = gettid();
            std::unique_lock<std::mutex> lock(m);  // contended: main holds it
            ++arrived;
            cv.notify_all();
            cv.wait(lock, [&] { return go; });
        });
    }
    if (!wait_asleep(tids)) {
        std::fprintf(stderr, "workers never blocked on the mutex\n");
        return 1;
    }
    cv.wait(held, [&] { return arrived == workers; });  // releases m: the workers get it in turn
    go = true;
    cv.notify_all();
    held.unlock();
    for (auto& t : threads)
        t.join();
    std::printf("ok %d\n", arrived);
    return 0;
}
