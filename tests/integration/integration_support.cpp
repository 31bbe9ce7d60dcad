#include "tests/integration/integration_support.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <thread_db.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/unique_fd.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/wait_until.hpp"

namespace tdctl::itest {

using namespace tdctl::test;
using namespace std::chrono_literals;

namespace {

std::string cut(std::string_view text, std::size_t max = 4000)
{
    if (text.size() <= max)
        return std::string(text);
    return fmt::format("{}\n... [{} bytes cut] ...\n{}", text.substr(0, max / 2), text.size() - max,
                       text.substr(text.size() - max / 2));
}

bool has_arg(const std::vector<std::string>& args, std::string_view arg)
{
    for (const auto& a : args) {
        if (a == "--")
            return false;
        if (a == arg)
            return true;
    }
    return false;
}

std::string file_name_of(std::string_view path)
{
    constexpr std::string_view deleted = " (deleted)";
    if (path.ends_with(deleted))
        path.remove_suffix(deleted.size());
    auto slash = path.rfind('/');
    return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::map<std::string, std::uint64_t> dynamic_symbols(const std::string& path)
{
    auto nm = find_program("nm");
    if (!nm)
        throw std::runtime_error("nm (binutils) is not installed; it is needed to read " + path);
    auto r = run_command({*nm, "-D", "--defined-only", path}, 30s);
    if (!r.status.is_success())
        throw std::runtime_error("nm -D failed: " + r.describe());
    std::map<std::string, std::uint64_t> symbols;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
        std::istringstream words(line);
        std::string value, type, name;
        if (!(words >> value >> type >> name))
            continue;
        if (auto at = name.find('@'); at != std::string::npos)
            name.resize(at);
        symbols.emplace(name, std::stoull(value, nullptr, 16));
    }
    return symbols;
}

}  // namespace

// ------------------------------------------------------------------ tdctl runs

std::vector<json> tdctl_run::of_type(std::string_view type) const { return records_of_type(records, type); }

std::vector<json> tdctl_run::events(std::string_view name) const { return event_records(records, name); }

std::string tdctl_run::describe() const
{
    return fmt::format("{}\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}", result.command,
                       result.status.describe(), cut(result.out), cut(result.err));
}

namespace {

// Whether tdctl's records go to stderr: --json for a launch (a program is
// named, or `--` given) without -o, as the README says.
bool records_on_stderr(const std::vector<std::string>& args)
{
    bool launch = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--" || !a.starts_with("-")) {
            launch = true;
            break;
        }
        if (a == "-o" || a == "--output" || a.starts_with("--output="))
            return false;
        if (a == "-p" || a == "--pid" || a == "-e" || a == "--eval" || a == "-x" || a == "--command")
            ++i;
    }
    return launch;
}

}  // namespace

tdctl_run run_tdctl(const std::vector<std::string>& args, milliseconds timeout, const run_options& options)
{
    std::vector<std::string> argv{tdctl_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    tdctl_run run{run_command(argv, timeout, options), {}};
    if (has_arg(args, "--json")) {
        try {
            run.records = json_lines(records_on_stderr(args) ? run.result.err : run.result.out);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(fmt::format("tdctl --json printed a line that is not JSON: {}\n{}", e.what(),
                                                 run.describe()));
        }
    }
    return run;
}

std::vector<json> records_of_type(const std::vector<json>& records, std::string_view type)
{
    std::vector<json> out;
    for (const auto& r : records)
        if (r.is_object() && r.contains("type") && r["type"] == type)
            out.push_back(r);
    return out;
}

std::vector<json> event_records(const std::vector<json>& records, std::string_view name)
{
    std::vector<json> out;
    for (const auto& r : records_of_type(records, "event"))
        if (r.contains("event") && r["event"] == name)
            out.push_back(r);
    return out;
}

std::vector<json> parse_records(std::string_view text) { return json_lines(text); }

std::uint64_t hex_field(const json& record, const char* field)
{
    if (!record.contains(field) || !record[field].is_string())
        throw std::runtime_error(fmt::format("record has no string field '{}': {}", field, record.dump()));
    const std::string s = record[field].get<std::string>();
    if (!s.starts_with("0x") || s.size() < 3 || s.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos)
        throw std::runtime_error(fmt::format("field '{}' is not 0x-hex: {}", field, record.dump()));
    return std::stoull(s.substr(2), nullptr, 16);
}

std::int64_t int_field(const json& record, const char* field)
{
    if (!record.contains(field) || !record[field].is_number_integer())
        throw std::runtime_error(fmt::format("record has no integer field '{}': {}", field, record.dump()));
    return record[field].get<std::int64_t>();
}

std::multiset<pid_t> tid_multiset(const std::vector<json>& records)
{
    std::multiset<pid_t> out;
    for (const auto& r : records)
        out.insert(static_cast<pid_t>(int_field(r, "tid")));
    return out;
}

std::multiset<pid_t> to_multiset(const std::vector<pid_t>& tids) { return {tids.begin(), tids.end()}; }

std::string multiset_difference(const std::multiset<pid_t>& expected, const std::multiset<pid_t>& actual)
{
    std::vector<pid_t> missing, extra;
    std::set_difference(expected.begin(), expected.end(), actual.begin(), actual.end(), std::back_inserter(missing));
    std::set_difference(actual.begin(), actual.end(), expected.begin(), expected.end(), std::back_inserter(extra));
    if (missing.empty() && extra.empty())
        return {};
    auto list = [](const std::vector<pid_t>& v) {
        std::string s;
        for (std::size_t i = 0; i < v.size() && i < 40; ++i)
            s += fmt::format("{}{}", i ? " " : "", v[i]);
        if (v.size() > 40)
            s += fmt::format(" ... ({} in all)", v.size());
        return s;
    };
    return fmt::format("expected {} TIDs, got {}; missing: [{}]; unexpected: [{}]", expected.size(), actual.size(),
                       list(missing), list(extra));
}

bool has_function(const json& frames, std::string_view name)
{
    for (const auto& f : frames)
        if (f["function"].is_string() && f["function"].get<std::string>() == name)
            return true;
    return false;
}

std::string malformed_thread_events(const std::vector<json>& events)
{
    std::string problems;
    for (const auto& ev : events) {
        try {
            auto tid = int_field(ev, "tid");
            auto reporter = int_field(ev, "reporter");
            auto handle = hex_field(ev, "handle");
            auto data = hex_field(ev, "data");
            if (tid <= 0 || reporter <= 0 || handle == 0)
                problems += "zero tid/reporter/handle: " + ev.dump() + "\n";
            else if (data != handle)
                problems += "data is not the handle: " + ev.dump() + "\n";
            else if (!ev.contains("name") || !ev["name"].is_string())
                problems += "no name: " + ev.dump() + "\n";
        } catch (const std::runtime_error& e) {
            problems += std::string(e.what()) + "\n";
        }
        if (problems.size() > 2000)
            break;
    }
    return problems;
}

std::optional<std::string> find_program(const std::string& name)
{
    const char* path = std::getenv("PATH");
    std::string_view dirs = path ? path : "/usr/bin:/bin";
    while (!dirs.empty()) {
        auto colon = dirs.find(':');
        std::string dir(dirs.substr(0, colon));
        if (!dir.empty()) {
            std::string candidate = dir + "/" + name;
            if (::access(candidate.c_str(), X_OK) == 0)
                return candidate;
        }
        if (colon == std::string_view::npos)
            break;
        dirs.remove_prefix(colon + 1);
    }
    return std::nullopt;
}

// ------------------------------------------------------------------ target memory

std::uint64_t mapped_module::address_of(const std::string& name) const
{
    auto it = symbols.find(name);
    if (it == symbols.end())
        throw std::runtime_error(fmt::format("{} has no dynamic symbol {}", mapped_path, name));
    return base + it->second;
}

mapped_module find_module(pid_t pid, std::string_view file_name, const std::string& symbol_source)
{
    for (const auto& m : proc_maps(pid)) {
        if (m.offset != 0 || m.path.empty() || file_name_of(m.path) != file_name)
            continue;
        mapped_module mod;
        mod.mapped_path = m.path;
        mod.base = m.start;
        mod.symbols = dynamic_symbols(symbol_source.empty() ? m.path : symbol_source);
        return mod;
    }
    throw std::runtime_error(fmt::format("process {} has no mapping of {}", pid, file_name));
}

db_descriptor read_descriptor(pid_t pid, const mapped_module& libc, const std::string& name)
{
    auto bytes = read_proc_mem(pid, libc.address_of(name), 12);
    if (bytes.size() != 12)
        throw std::runtime_error(fmt::format("cannot read descriptor {} of process {}", name, pid));
    db_descriptor d;
    std::memcpy(&d.size_bits, bytes.data(), 4);
    std::memcpy(&d.count, bytes.data() + 4, 4);
    std::memcpy(&d.offset, bytes.data() + 8, 4);
    return d;
}

memory_snapshot take_snapshot(pid_t pid, const std::vector<memory_region>& regions)
{
    memory_snapshot snap;
    for (const auto& r : regions) {
        auto bytes = read_proc_mem(pid, r.address, r.length);
        if (bytes.size() != r.length)
            throw std::runtime_error(fmt::format("short read of {} at {:#x} in process {}", r.name, r.address, pid));
        snap[r.name] = std::move(bytes);
    }
    return snap;
}

std::string hex_bytes(const std::vector<std::uint8_t>& bytes)
{
    std::string s;
    for (auto b : bytes)
        s += fmt::format("{}{:02x}", s.empty() ? "" : " ", b);
    return s;
}

std::string snapshot_difference(const memory_snapshot& before, const memory_snapshot& after)
{
    std::string diff;
    for (const auto& [name, bytes] : before) {
        auto it = after.find(name);
        if (it == after.end())
            diff += fmt::format("{}: missing afterwards\n", name);
        else if (it->second != bytes)
            diff += fmt::format("{}: before [{}] after [{}]\n", name, hex_bytes(bytes), hex_bytes(it->second));
    }
    return diff;
}

std::vector<memory_region> nptl_regions(pid_t pid, const std::vector<std::uint64_t>& thread_handles,
                                        const std::string& libc_symbol_source)
{
    auto libc = find_module(pid, "libc.so.6", libc_symbol_source);
    std::vector<memory_region> regions{
        {"text __nptl_create_event", libc.address_of("__nptl_create_event"), 16},
        {"text __nptl_death_event", libc.address_of("__nptl_death_event"), 16},
        {"__nptl_threads_events", libc.address_of("__nptl_threads_events"), sizeof(td_thr_events_t)},
        {"__nptl_last_event", libc.address_of("__nptl_last_event"), sizeof(std::uint64_t)},
    };
    auto ld = find_module(pid, "ld-linux-x86-64.so.2");
    if (ld.has("__nptl_initial_report_events"))
        regions.push_back({"__nptl_initial_report_events", ld.address_of("__nptl_initial_report_events"), 1});

    auto field = [&](const char* descriptor) {
        auto d = read_descriptor(pid, libc, descriptor);
        std::size_t bytes = d.size_bits / 8 * std::max<std::uint32_t>(d.count, 1);
        if (bytes == 0 || bytes > 256)
            throw std::runtime_error(fmt::format("implausible descriptor {}: {} bits x {}", descriptor, d.size_bits,
                                                 d.count));
        return std::pair{d.offset, bytes};
    };
    auto [report_off, report_len] = field("_thread_db_pthread_report_events");
    auto [buf_off, buf_len] = field("_thread_db_pthread_eventbuf");
    auto [next_off, next_len] = field("_thread_db_pthread_nextevent");
    for (auto h : thread_handles) {
        regions.push_back({fmt::format("{:#x}.report_events", h), h + report_off, report_len});
        regions.push_back({fmt::format("{:#x}.eventbuf", h), h + buf_off, buf_len});
        regions.push_back({fmt::format("{:#x}.nextevent", h), h + next_off, next_len});
    }
    return regions;
}

void write_proc_mem(pid_t pid, std::uint64_t address, const std::vector<std::uint8_t>& bytes)
{
    const std::string path = fmt::format("/proc/{}/mem", pid);
    unique_fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (!fd.is_open())
        throw std::runtime_error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
    auto n = ::pwrite(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(address));
    if (n != static_cast<ssize_t>(bytes.size()))
        throw std::runtime_error(fmt::format("writing {} bytes at {:#x} of process {}: {}", bytes.size(), address, pid,
                                             n < 0 ? std::strerror(errno) : "short write"));
}

nptl_event_fields find_nptl_event_fields(pid_t pid, const std::string& libc_symbol_source)
{
    auto libc = find_module(pid, "libc.so.6", libc_symbol_source);
    auto report = read_descriptor(pid, libc, "_thread_db_pthread_report_events");
    auto mask = read_descriptor(pid, libc, "_thread_db_pthread_eventbuf_eventmask");
    if (report.size_bits == 0 || report.size_bits % 8 != 0 || mask.size_bits != 8 * sizeof(td_thr_events_t))
        throw std::runtime_error(fmt::format("implausible descriptors: report_events {} bits, eventmask {} bits",
                                             report.size_bits, mask.size_bits));
    nptl_event_fields f;
    f.global_mask = libc.address_of("__nptl_threads_events");
    f.report_events_offset = report.offset;
    f.report_events_bytes = report.size_bits / 8;
    f.eventmask_offset = mask.offset;
    return f;
}

std::vector<std::uint8_t> event_mask_bytes(std::initializer_list<td_event_e> events)
{
    td_thr_events_t mask;
    td_event_emptyset(&mask);
    for (td_event_e e : events)
        td_event_addset(&mask, e);
    std::vector<std::uint8_t> bytes(sizeof mask);
    std::memcpy(bytes.data(), &mask, sizeof mask);
    return bytes;
}

namespace {

void write_and_check(pid_t pid, std::uint64_t address, const std::vector<std::uint8_t>& bytes)
{
    write_proc_mem(pid, address, bytes);
    if (read_proc_mem(pid, address, bytes.size()) != bytes)
        throw std::runtime_error(fmt::format("process {}: the bytes written at {:#x} did not stick", pid, address));
}

}  // namespace

void write_global_mask(pid_t pid, const nptl_event_fields& fields, std::initializer_list<td_event_e> events)
{
    write_and_check(pid, fields.global_mask, event_mask_bytes(events));
}

void write_thread_mask(pid_t pid, const nptl_event_fields& fields, std::uint64_t handle,
                       std::initializer_list<td_event_e> events)
{
    write_and_check(pid, handle + fields.eventmask_offset, event_mask_bytes(events));
}

void write_report_events(pid_t pid, const nptl_event_fields& fields, std::uint64_t handle, bool on)
{
    std::vector<std::uint8_t> flag(fields.report_events_bytes, 0);
    flag[0] = on ? 1 : 0;
    write_and_check(pid, handle + fields.report_events_offset, flag);
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path, std::uint64_t offset, std::size_t length)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot open " + path);
    in.seekg(static_cast<std::streamoff>(offset));
    std::vector<std::uint8_t> bytes(length);
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(length));
    bytes.resize(static_cast<std::size_t>(in.gcount()));
    return bytes;
}

std::optional<std::uint64_t> file_offset_of(pid_t pid, std::uint64_t address)
{
    for (const auto& m : proc_maps(pid))
        if (address >= m.start && address < m.end && !m.path.empty())
            return address - m.start + m.offset;
    return std::nullopt;
}

// ------------------------------------------------------------------ processes

pid_t unused_pid()
{
    int pid_max = 32768;
    if (auto text = read_text_file("/proc/sys/kernel/pid_max"))
        pid_max = std::atoi(text->c_str());
    // From the top down: the kernel hands out PIDs upwards from the last one,
    // so the top of the range is the last to be reused.
    for (pid_t pid = pid_max - 1; pid > 300; --pid) {
        if (::kill(pid, 0) != 0 && errno == ESRCH && !std::filesystem::exists(fmt::format("/proc/{}", pid)))
            return pid;
    }
    throw std::runtime_error("no unused PID found");
}

std::optional<pid_t> kernel_thread_pid()
{
    constexpr unsigned long pf_kthread = 0x00200000;
    std::vector<pid_t> candidates{2};
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        auto name = entry.path().filename().string();
        if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos && candidates.size() < 64)
            candidates.push_back(std::atoi(name.c_str()));
    }
    for (pid_t pid : candidates) {
        auto stat = read_text_file(fmt::format("/proc/{}/stat", pid));
        if (!stat)
            continue;
        auto close = stat->rfind(')');
        if (close == std::string::npos)
            continue;
        // After the comm: state ppid pgrp session tty_nr tpgid flags.
        std::istringstream rest(stat->substr(close + 1));
        std::string field;
        unsigned long flags = 0;
        for (int i = 0; i < 7 && rest >> field; ++i)
            if (i == 6)
                flags = std::stoul(field);
        if (flags & pf_kthread)
            return pid;
    }
    return std::nullopt;
}

std::optional<std::string> attach_unavailable_reason()
{
    static std::once_flag once;
    static std::optional<std::string> reason;
    std::call_once(once, [] {
        if (auto no_ptrace = ptrace_unavailable_reason()) {
            reason = no_ptrace;
            return;
        }
        temp_file record("attach-probe");
        auto target = child_process::spawn({fixture_path("sleeper"), "--record", record.path(), "1"});
        try {
            wait_for_fact(record.path(), "done", 1, 10s);
        } catch (const std::runtime_error& e) {
            reason = std::string("the sleeper fixture did not start: ") + e.what();
            return;
        }
        auto r = run_command({tdctl_path(), "-p", std::to_string(target.pid()), "-e", "threads"}, 30s);
        if (!r.status.is_success() &&
            (r.err.find("ermission") != std::string::npos || r.err.find("EPERM") != std::string::npos))
            reason = "tdctl may not attach to a process of this test: " + r.err;
    });
    return reason;
}

void require_attach()
{
    if (auto reason = attach_unavailable_reason())
        skip_test(*reason);
}

child_process watch_then_go(child_process& target)
{
    const pid_t pid = target.pid();
    auto libc = find_module(pid, "libc.so.6");
    const auto create_addr = libc.address_of("__nptl_create_event");
    const auto original = read_proc_mem(pid, create_addr, 16);
    auto tdctl = child_process::spawn({tdctl_path(), "--json", "-p", std::to_string(pid), "-e", "watch"});
    const std::string first = tdctl.require_line(20s);
    if (json::parse(first, nullptr, false).value("type", "") != "attached")
        throw std::runtime_error("tdctl's first record is not `attached`: " + first);
    if (!wait_until([&] { return read_proc_mem(pid, create_addr, 16) != original; }, 10s))
        throw std::runtime_error("tdctl attached but planted no breakpoint at __nptl_create_event within 10 s");
    if (!target.write_stdin("x"))
        throw std::runtime_error("cannot send the fixture its go byte");
    return tdctl;
}

child_process start_fixture(const std::string& name, const std::vector<std::string>& args,
                            const std::string& record_path, const spawn_options& options)
{
    std::vector<std::string> argv{fixture_path(name)};
    argv.insert(argv.end(), args.begin(), args.end());
    auto child = child_process::spawn(argv, options);
    wait_for_fact(record_path, "done", 1, 20s);
    return child;
}

steer_thread steer_spawn(child_process& steer, milliseconds timeout)
{
    const std::string answer = steer.ask("spawn", timeout);
    std::istringstream words(answer);
    std::string word, handle;
    steer_thread t;
    if (!(words >> word >> t.index >> t.tid >> handle) || word != "thread" || t.tid <= 0 || !handle.starts_with("0x"))
        throw std::runtime_error(fmt::format("{}: unexpected answer to spawn: '{}'", steer.describe(), answer));
    t.handle = std::stoull(handle.substr(2), nullptr, 16);
    return t;
}

std::set<pid_t> live_tids(pid_t pid)
{
    auto tids = task_tids(pid);
    return {tids.begin(), tids.end()};
}

std::map<pid_t, char> task_states(pid_t pid)
{
    std::map<pid_t, char> states;
    for (pid_t tid : task_tids(pid))
        if (auto s = task_state(pid, tid))
            states[tid] = *s;
    return states;
}

std::string traced_tasks(pid_t pid, std::string_view states)
{
    std::string out;
    for (pid_t tid : task_tids(pid)) {
        auto status = read_text_file(fmt::format("/proc/{}/task/{}/status", pid, tid)).value_or("");
        auto at = status.find("TracerPid:");
        long tracer = at == std::string::npos ? 0 : std::strtol(status.c_str() + at + 10, nullptr, 10);
        char state = task_state(pid, tid).value_or('?');
        if (tracer != 0 || states.find(state) != std::string_view::npos)
            out += fmt::format("{}: tracer {} state {}\n", tid, tracer, state);
    }
    return out;
}

}  // namespace tdctl::itest
