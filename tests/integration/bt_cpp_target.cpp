// A C++ program parked in a function whose symbol is mangled, for `bt`:
// prints "ready", then sleeps inside bt_fixture::parking::wait_here(int).
// With the argument `thread`, it first starts one thread whose start routine
// is the C++ function bt_fixture::parked_worker(void*) (for the START column
// of `threads`), and prints "ready" once that thread runs.
#include <cstdio>
#include <cstring>

#include <pthread.h>
#include <unistd.h>

namespace bt_fixture {

struct parking {
    [[gnu::noinline]] static void wait_here(int seconds);
};

void parking::wait_here(int seconds)
{
    std::printf("ready\n");
    std::fflush(stdout);
    ::sleep(static_cast<unsigned>(seconds));
    asm volatile("" ::: "memory");   // not a tail call: the frame stays
}

pthread_barrier_t started;

void* parked_worker(void*)
{
    pthread_barrier_wait(&started);
    ::sleep(60);
    return nullptr;
}

}  // namespace bt_fixture

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "thread") == 0) {
        pthread_barrier_init(&bt_fixture::started, nullptr, 2);
        pthread_t worker;
        if (pthread_create(&worker, nullptr, &bt_fixture::parked_worker, nullptr) != 0)
            return 3;
        pthread_barrier_wait(&bt_fixture::started);
    }
    bt_fixture::parking::wait_here(60);
    return 0;
}
