// stats_api_bench --pid PID [--reps R]
//
// Times the statistics calls through the session API, in-process: attach to
// PID, then R × get_stats() (gathering on), R × rusage_collect() of every LWP,
// R × lwp_info() of every LWP. Prints one JSON object: ms per call (a call =
// one get_stats, or one pass over all LWPs), the LWP count, and the attach
// time. No output formatting is measured; run_stats_bench compares this with
// the tdctl commands.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "base/error.hpp"
#include "core/session/session.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0)
{
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv)
{
    pid_t pid = 0;
    long reps = 100;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--pid") == 0 && i + 1 < argc)
            pid = static_cast<pid_t>(std::atol(argv[++i]));
        else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = std::atol(argv[++i]);
        else {
            std::fprintf(stderr, "usage: stats_api_bench --pid PID [--reps R]\n");
            return 64;
        }
    }
    if (pid <= 0 || reps <= 0) {
        std::fprintf(stderr, "usage: stats_api_bench --pid PID [--reps R]\n");
        return 64;
    }
    try {
        auto t_attach = clock_type::now();
        auto s = tdctl::core::session::attach(pid);
        double attach_ms = ms_since(t_attach);
        auto lwps = s->target().lwps();
        (void)s->accounting().enable_stats(true);
        s->accounting().rusage_start();

        long errors = 0;
        auto t0 = clock_type::now();
        int nthreads = 0;
        for (long i = 0; i < reps; ++i) {
            auto st = s->accounting().get_stats();
            if (!st)
                ++errors;
            else
                nthreads = st->td.nthreads;
        }
        double stats_ms = ms_since(t0) / static_cast<double>(reps);

        t0 = clock_type::now();
        for (long i = 0; i < reps; ++i)
            for (auto t : lwps)
                if (!s->accounting().rusage_collect(t))
                    ++errors;
        double rusage_ms = ms_since(t0) / static_cast<double>(reps);

        t0 = clock_type::now();
        for (long i = 0; i < reps; ++i)
            for (auto t : lwps)
                if (!s->accounting().lwp_info(t))
                    ++errors;
        double lwpinfo_ms = ms_since(t0) / static_cast<double>(reps);

        std::printf("%s\n", fmt::format("{{\"lwps\":{},\"nthreads\":{},\"reps\":{},\"attach_ms\":{:.3f},"
                                        "\"get_stats_ms\":{:.4f},\"rusage_all_ms\":{:.4f},\"lwp_info_all_ms\":{:.4f},"
                                        "\"errors\":{}}}",
                                        lwps.size(), nthreads, reps, attach_ms, stats_ms, rusage_ms, lwpinfo_ms,
                                        errors)
                                .c_str());
        return errors == 0 ? 0 : 3;
    } catch (const tdctl::error& e) {
        std::fprintf(stderr, "stats_api_bench: %s\n", e.what());
        return 2;
    }
}
