// A C++ program parked in a function whose symbol is mangled, for `bt`:
// prints "ready", then sleeps inside bt_fixture::parking::wait_here(int).
#include <cstdio>

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

}  // namespace bt_fixture

int main()
{
    bt_fixture::parking::wait_here(60);
    return 0;
}
