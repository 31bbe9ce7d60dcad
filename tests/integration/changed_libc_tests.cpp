// A libc replaced or deleted on disk after it was mapped (acceptance 8):
// tdctl reads its symbols through /proc/PID/map_files/, and when this test may
// open that file, so may tdctl, and events must work. Without that access:
// libc_refusal_tests.cpp.
#include <doctest/doctest.h>

#include <string>

#include "tests/integration/changed_libc.hpp"
#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

TEST_SUITE("hard cases")
{
    // Acceptance 8: events still work, or a clear refusal. tdctl reads the
    // symbols of a deleted or replaced libc through /proc/PID/map_files/;
    // when this test may open that file, so may tdctl, and events must work.
    // Only when it may not is a refusal accepted, and it must say why
    // (tests/integration/libc_refusal_tests.cpp forces that case).
    TEST_CASE("libc replaced or deleted on disk after mapping: events work (or, without map_files, a clear refusal)")
    {
        require_attach();
        for (const auto how : {libc_change::replaced, libc_change::deleted}) {
            const std::string change = how == libc_change::deleted ? "deleted" : "replaced";
            CAPTURE(change);
            changed_libc_target target(how);
            const bool readable = target.map_files_readable();
            INFO(target.map_files_path() << (readable ? std::string(" is") : std::string(" is not"))
                                          << " readable by this test");
            check_session_on_changed_libc(target, {}, !readable);
        }
    }
}
