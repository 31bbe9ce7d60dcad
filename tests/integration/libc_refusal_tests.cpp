// A deleted or replaced libc that tdctl may not open (acceptance 8: "a clear
// refusal"). tdctl can open the mapped file only through
// /proc/PID/map_files/, which needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE;
// here tdctl runs without both (dropped with setpriv when this test has
// them), so it cannot, and it must either still make events work or refuse
// with a message that names that reason. The case where map_files is
// readable is in changed_libc_tests.cpp. Its own executable, so that its
// outcome is reported apart.
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/changed_libc.hpp"
#include "tests/integration/integration_support.hpp"

using namespace tdctl::test;
using namespace tdctl::itest;
using namespace std::chrono_literals;

namespace {

constexpr int cap_setpcap = 8;
constexpr int cap_sys_admin = 21;
constexpr int cap_checkpoint_restore = 40;

/// A capability set line of /proc/self/status ("CapEff", "CapBnd").
std::uint64_t capability_set(const std::string& name)
{
    auto status = read_text_file("/proc/self/status");
    REQUIRE(status.has_value());
    std::istringstream lines(*status);
    for (std::string line; std::getline(lines, line);)
        if (line.starts_with(name + ":"))
            return std::stoull(line.substr(name.size() + 1), nullptr, 16);
    FAIL("no " << name << " in /proc/self/status");
    return 0;
}

bool has(std::uint64_t set, int cap) { return (set >> cap) & 1; }

/// The command prefix that runs a program without CAP_SYS_ADMIN and
/// CAP_CHECKPOINT_RESTORE: empty when this test does not have them, else
/// setpriv dropping them from the bounding and inheritable sets (for root,
/// exec then leaves them out of the permitted and effective sets).
std::vector<std::string> without_map_files_capabilities()
{
    const auto effective = capability_set("CapEff");
    const auto bounding = capability_set("CapBnd");
    if (!has(effective, cap_sys_admin) && !has(effective, cap_checkpoint_restore))
        return {};
    auto setpriv = find_program("setpriv");
    REQUIRE_MESSAGE(setpriv.has_value(), "setpriv (util-linux) is needed to drop CAP_SYS_ADMIN");
    REQUIRE_MESSAGE(has(effective, cap_setpcap), "this test has CAP_SYS_ADMIN but not CAP_SETPCAP to drop it");
    std::string drop = "-sys_admin";
    if (has(bounding, cap_checkpoint_restore))
        drop += ",-checkpoint_restore";
    return {*setpriv, "--inh-caps=" + drop, "--bounding-set=" + drop};
}

}  // namespace

TEST_SUITE("hard cases")
{
    TEST_CASE("libc replaced or deleted, tdctl without access to map_files: events work or a refusal naming why")
    {
        require_attach();
        const auto prefix = without_map_files_capabilities();
        for (const auto how : {libc_change::replaced, libc_change::deleted}) {
            const std::string change = how == libc_change::deleted ? "deleted" : "replaced";
            CAPTURE(change);
            changed_libc_target target(how);
            // Under the prefix, map_files really cannot be opened.
            std::vector<std::string> probe = prefix;
            probe.insert(probe.end(), {"/bin/sh", "-c", "exec 3<\"$0\"", target.map_files_path()});
            auto opened = run_command(probe, 10s);
            INFO(opened.describe());
            REQUIRE_FALSE(opened.status.is_success());
            check_session_on_changed_libc(target, prefix, true);
        }
    }
}
