#include "tests/integration/changed_libc.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <set>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/unique_fd.hpp"

namespace tdctl::itest {

using namespace tdctl::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

/// The libc this test process runs with (the system's).
std::string system_libc()
{
    for (const auto& m : proc_maps(::getpid()))
        if (m.offset == 0 && fs::path(m.path).filename() == "libc.so.6")
            return m.path;
    throw std::runtime_error("this test process has no libc.so.6 mapping");
}

child_process start_on_copy(const temp_dir& dir, const temp_file& record)
{
    fs::copy_file(system_libc(), dir.path() + "/libc.so.6");
    spawn_options options;
    options.env = {{"LD_LIBRARY_PATH", dir.path()}};
    return child_process::spawn({fixture_path("steer"), "--record", record.path()}, options);
}

}  // namespace

temp_dir::temp_dir(std::string_view stem) : name_(stem) { fs::create_directories(name_.path()); }

temp_dir::~temp_dir()
{
    std::error_code ignored_because_best_effort;
    fs::remove_all(name_.path(), ignored_because_best_effort);
}

changed_libc_target::changed_libc_target(libc_change how)
    : dir_("tdctl-libc"), record_("steer-record"), steer_(start_on_copy(dir_, record_))
{
    REQUIRE(steer_.ask("ping") == "pong");
    const std::string copy = dir_.path() + "/libc.so.6";
    // Symbols from the system libc: the same bytes as the copy, which is
    // about to disappear.
    libc_ = find_module(pid(), "libc.so.6", system_libc());
    REQUIRE(libc_.mapped_path == copy);
    create_text_ = read_proc_mem(pid(), libc_.address_of("__nptl_create_event"), 16);
    death_text_ = read_proc_mem(pid(), libc_.address_of("__nptl_death_event"), 16);
    for (const auto& m : proc_maps(pid()))
        if (m.offset == 0 && m.path == copy)
            map_files_path_ = fmt::format("/proc/{}/map_files/{:x}-{:x}", pid(), m.start, m.end);
    REQUIRE(!map_files_path_.empty());

    if (how == libc_change::deleted) {
        fs::remove(copy);
    } else {
        // A different file at the same path, atomically (rename), as a
        // package upgrade does.
        fs::copy_file("/bin/true", dir_.path() + "/replacement");
        fs::rename(dir_.path() + "/replacement", copy);
    }
    REQUIRE(find_module(pid(), "libc.so.6", system_libc()).mapped_path.ends_with("(deleted)"));
}

bool changed_libc_target::map_files_readable() const
{
    unique_fd fd(::open(map_files_path_.c_str(), O_RDONLY | O_CLOEXEC));
    return fd.is_open();
}

void check_session_on_changed_libc(changed_libc_target& target, const std::vector<std::string>& prefix,
                                   bool refusal_allowed)
{
    const pid_t pid = target.pid();
    auto& steer = target.steer();
    const auto create_addr = target.libc().address_of("__nptl_create_event");
    const auto death_addr = target.libc().address_of("__nptl_death_event");

    // `threads` first: steer has only its main thread until the watch runs.
    const auto tids_at_start = live_tids(pid);
    REQUIRE(tids_at_start == std::set<pid_t>{pid});
    std::vector<std::string> argv = prefix;
    argv.insert(argv.end(), {tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "threads", "-e",
                             "watch create,death --count 2 --for 20"});
    auto tdctl = child_process::spawn(argv);
    auto armed = [&] {
        return read_proc_mem(pid, create_addr, 16) != target.create_text() &&
               read_proc_mem(pid, death_addr, 16) != target.death_text();
    };
    const bool watching = wait_until([&] { return armed() || tdctl.wait_exit(0ms).has_value(); }, 10s) && armed();
    std::optional<steer_thread> spawned;
    if (watching) {
        spawned = steer_spawn(steer);
        CHECK(steer.ask(fmt::format("release {}", spawned->index)) == fmt::format("released {}", spawned->index));
        CHECK(steer.ask(fmt::format("join {}", spawned->index)) == fmt::format("joined {}", spawned->index));
    }
    auto status = tdctl.require_exit(30s);
    INFO(shell_quote(argv));
    INFO("tdctl " << status.describe() << "\nstdout:\n" << tdctl.stdout_text() << "stderr:\n" << tdctl.stderr_text());
    auto records = parse_records(tdctl.stdout_text());

    if (status.exit_code() == 0 || !refusal_allowed) {
        // Events work.
        CHECK(status.exit_code() == 0);
        REQUIRE_MESSAGE(spawned.has_value(), "tdctl never armed both reporting addresses");
        auto creates = event_records(records, "TD_CREATE");
        auto deaths = event_records(records, "TD_DEATH");
        REQUIRE(creates.size() == 1);
        REQUIRE(deaths.size() == 1);
        CHECK(int_field(creates[0], "tid") == spawned->tid);
        CHECK(hex_field(creates[0], "handle") == spawned->handle);
        CHECK(int_field(deaths[0], "tid") == spawned->tid);
        CHECK(hex_field(deaths[0], "handle") == spawned->handle);
        auto bad = malformed_thread_events(creates) + malformed_thread_events(deaths);
        CHECK_MESSAGE(bad.empty(), bad);
        auto ends = records_of_type(records, "watch_end");
        REQUIRE(ends.size() == 1);
        CHECK(ends[0]["reason"] == "count");
    } else {
        // A refusal: exit 2, and the message says why: the mapped file could
        // only be opened through map_files, which needs a capability.
        CHECK(status.exit_code() == 2);
        CHECK_FALSE(spawned.has_value());
        auto errors = records_of_type(records, "error");
        REQUIRE(errors.size() == 1);
        const std::string message = errors[0].value("message", "");
        CAPTURE(message);
        CHECK(message.find("map_files") != std::string::npos);
        const bool names_capability = message.find("CAP_SYS_ADMIN") != std::string::npos ||
                                      message.find("CAP_CHECKPOINT_RESTORE") != std::string::npos;
        CHECK_MESSAGE(names_capability, "the message names neither CAP_SYS_ADMIN nor CAP_CHECKPOINT_RESTORE");
        CHECK(tdctl.stderr_text().find(message) != std::string::npos);
        CHECK(event_records(records, "TD_CREATE").empty());
    }
    // Either way, the threads are listed (from the thread library or /proc).
    std::multiset<pid_t> listed;
    for (const auto& t : records_of_type(records, "thread"))
        listed.insert(static_cast<pid_t>(int_field(t, "tid")));
    CHECK(listed == std::multiset<pid_t>(tids_at_start.begin(), tids_at_start.end()));

    // The target is fine and was put back.
    CHECK(tracer_pid(pid) == 0);
    CHECK(read_proc_mem(pid, create_addr, 16) == target.create_text());
    CHECK(read_proc_mem(pid, death_addr, 16) == target.death_text());
    CHECK(steer.ask("ping") == "pong");
    auto later = steer_spawn(steer);
    CHECK(live_tids(pid).contains(later.tid));
    CHECK(steer.ask(fmt::format("release {}", later.index)) == fmt::format("released {}", later.index));
    CHECK(steer.ask(fmt::format("join {}", later.index)) == fmt::format("joined {}", later.index));
    CHECK(steer.ask("quit") == "bye");
    auto steer_status = steer.require_exit(10s);
    CHECK_MESSAGE(steer_status.is_success(), steer_status.describe() << "; " << steer.stderr_text());
}

}  // namespace tdctl::itest
