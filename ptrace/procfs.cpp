#include "ptrace/procfs.hpp"

#include <cstdlib>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/unique_fd.hpp"

namespace tdctl::procfs {

namespace {

template <typename T>
T to_number(std::string_view s, int base = 10)
{
    T v{};
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    std::from_chars(s.data(), s.data() + s.size(), v, base);
    return v;
}

// Splits on runs of blanks.
std::vector<std::string_view> split_words(std::string_view s)
{
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n'))
            ++i;
        std::size_t j = i;
        while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\n')
            ++j;
        if (j > i)
            out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

}  // namespace

std::optional<std::string> read_fd(int fd, proc_records records)
{
    std::string out;
    char buf[4096];
    off_t off = 0;
    for (;;) {
        ssize_t n = ::pread(fd, buf, sizeof buf, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return std::nullopt;
        }
        if (n == 0)
            break;
        out.append(buf, static_cast<std::size_t>(n));
        off += n;
        if (records == proc_records::one && static_cast<std::size_t>(n) < sizeof buf)
            break;
    }
    return out;
}

std::optional<std::string> read_file(const std::string& path)
{
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.is_open())
        return std::nullopt;
    return read_fd(fd.get());
}

namespace {

// The parse of one /proc file, or nullopt when it cannot be read.
template <typename T, typename Parse>
std::optional<T> parse_file(const std::string& path, Parse parse)
{
    auto text = read_file(path);
    if (!text)
        return std::nullopt;
    return parse(*text);
}

}  // namespace

std::vector<tid_t> list_tasks(pid_t pid)
{
    std::vector<tid_t> out;
    std::string path = fmt::format("/proc/{}/task", pid);
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr)
        return out;
    while (dirent* e = ::readdir(dir)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        out.emplace_back(to_number<pid_t>(e->d_name));
    }
    ::closedir(dir);
    std::sort(out.begin(), out.end());
    return out;
}

status_info parse_status(std::string_view text)
{
    status_info st;
    while (!text.empty()) {
        std::size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        std::size_t colon = line.find(':');
        if (colon == std::string_view::npos)
            continue;
        std::string_view key = line.substr(0, colon);
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
            value.remove_prefix(1);
        if (key == "Name")
            st.name = std::string(value);
        else if (key == "State")
            st.state = value.empty() ? '?' : value.front();
        else if (key == "Tgid")
            st.tgid = to_number<pid_t>(value);
        else if (key == "Pid")
            st.pid = to_number<pid_t>(value);
        else if (key == "PPid")
            st.ppid = to_number<pid_t>(value);
        else if (key == "TracerPid")
            st.tracer_pid = to_number<pid_t>(value);
        else if (key == "Uid") {
            auto words = split_words(value);
            if (words.size() >= 2) {
                st.uid_real = to_number<uid_t>(words[0]);
                st.uid_effective = to_number<uid_t>(words[1]);
            }
        } else if (key == "CapEff")
            st.cap_effective = to_number<std::uint64_t>(value, 16);
        else if (key == "SigCgt")
            st.signals_caught = to_number<std::uint64_t>(value, 16);
        else if (key == "SigIgn")
            st.signals_ignored = to_number<std::uint64_t>(value, 16);
        else if (key == "SigBlk")
            st.signals_blocked = to_number<std::uint64_t>(value, 16);
        else if (key == "SigPnd")
            st.signals_pending = to_number<std::uint64_t>(value, 16);
        else if (key == "VmHWM")
            st.vm_hwm_kb = to_number<std::uint64_t>(value);
        else if (key == "voluntary_ctxt_switches")
            st.voluntary_ctxt_switches = to_number<std::uint64_t>(value);
        else if (key == "nonvoluntary_ctxt_switches")
            st.nonvoluntary_ctxt_switches = to_number<std::uint64_t>(value);
        else if (key == "Threads")
            st.threads = to_number<int>(value);
        else if (key == "NSpid") {
            st.ns_pids.clear();
            for (auto w : split_words(value))
                st.ns_pids.push_back(to_number<pid_t>(w));
        }
    }
    return st;
}

std::optional<status_info> read_status(pid_t pid)
{
    return parse_file<status_info>(fmt::format("/proc/{}/status", pid), parse_status);
}

std::optional<status_info> read_task_status(pid_t pid, tid_t tid)
{
    return parse_file<status_info>(fmt::format("/proc/{}/task/{}/status", pid, tid.value), parse_status);
}

std::optional<stat_info> parse_stat(std::string_view text)
{
    std::size_t open = text.find('(');
    std::size_t close = text.rfind(')');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open)
        return std::nullopt;
    stat_info st;
    st.pid = to_number<pid_t>(text.substr(0, open));
    st.comm = std::string(text.substr(open + 1, close - open - 1));
    auto f = split_words(text.substr(close + 1));
    // f[0] is field 3 (state); field n is f[n - 3].
    auto field = [&](std::size_t n) -> std::string_view { return n - 3 < f.size() ? f[n - 3] : std::string_view{}; };
    if (f.size() < 20)
        return std::nullopt;
    st.state = field(3).empty() ? '?' : field(3).front();
    st.ppid = to_number<pid_t>(field(4));
    st.flags = to_number<unsigned>(field(9));
    st.minflt = to_number<std::uint64_t>(field(10));
    st.majflt = to_number<std::uint64_t>(field(12));
    st.utime = to_number<std::uint64_t>(field(14));
    st.stime = to_number<std::uint64_t>(field(15));
    st.num_threads = to_number<long>(field(20));
    st.starttime = to_number<std::uint64_t>(field(22));
    if (!field(39).empty())
        st.processor = to_number<int>(field(39));
    return st;
}

std::optional<stat_info> read_stat(pid_t pid)
{
    return parse_file<stat_info>(fmt::format("/proc/{}/stat", pid), parse_stat);
}

std::optional<stat_info> read_task_stat(pid_t pid, tid_t tid)
{
    return parse_file<stat_info>(fmt::format("/proc/{}/task/{}/stat", pid, tid.value), parse_stat);
}

std::optional<schedstat_info> parse_schedstat(std::string_view text)
{
    auto w = split_words(text);
    if (w.size() < 3)
        return std::nullopt;
    schedstat_info st;
    st.cpu_ns = to_number<std::uint64_t>(w[0]);
    st.wait_ns = to_number<std::uint64_t>(w[1]);
    st.timeslices = to_number<std::uint64_t>(w[2]);
    return st;
}

std::optional<schedstat_info> read_task_schedstat(pid_t pid, tid_t tid)
{
    return parse_file<schedstat_info>(fmt::format("/proc/{}/task/{}/schedstat", pid, tid.value), parse_schedstat);
}

std::optional<std::uint64_t> process_cpu_ns(pid_t pid)
{
    clockid_t clock{};
    timespec ts{};
    if (::clock_getcpuclockid(pid, &clock) != 0 || ::clock_gettime(clock, &ts) != 0)
        return std::nullopt;
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::optional<io_info> parse_io(std::string_view text)
{
    io_info io;
    bool seen = false;
    while (!text.empty()) {
        std::size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        std::size_t colon = line.find(':');
        if (colon == std::string_view::npos)
            continue;
        std::string_view key = line.substr(0, colon);
        if (key == "read_bytes") {
            io.read_bytes = to_number<std::uint64_t>(line.substr(colon + 1));
            seen = true;
        } else if (key == "write_bytes") {
            io.write_bytes = to_number<std::uint64_t>(line.substr(colon + 1));
            seen = true;
        }
    }
    if (!seen)
        return std::nullopt;
    return io;
}

std::optional<io_info> read_task_io(pid_t pid, tid_t tid)
{
    return parse_file<io_info>(fmt::format("/proc/{}/task/{}/io", pid, tid.value), parse_io);
}

std::optional<syscall_info> parse_syscall(std::string_view text)
{
    // "NR arg1 ... arg6 sp pc" (hex args), "-1 sp pc", or "running".
    std::string line(text);
    syscall_info out;
    char* end = nullptr;
    const char* p = line.c_str();
    long nr = std::strtol(p, &end, 10);
    if (end == p)
        return std::nullopt;
    out.number = nr;
    if (nr < 0)
        return out;
    p = end;
    for (auto& arg : out.args) {
        arg = std::strtoull(p, &end, 16);
        if (end == p)
            return std::nullopt;
        p = end;
    }
    return out;
}

std::optional<syscall_info> read_task_syscall(pid_t pid, tid_t tid)
{
    return parse_file<syscall_info>(fmt::format("/proc/{}/task/{}/syscall", pid, tid.value), parse_syscall);
}

std::string read_comm(pid_t pid, tid_t tid)
{
    auto text = read_file(fmt::format("/proc/{}/task/{}/comm", pid, tid.value));
    if (!text)
        return {};
    if (!text->empty() && text->back() == '\n')
        text->pop_back();
    return *text;
}

std::map<std::uint64_t, std::uint64_t> parse_auxv(std::string_view bytes)
{
    std::map<std::uint64_t, std::uint64_t> out;
    for (std::size_t i = 0; i + 16 <= bytes.size(); i += 16) {
        std::uint64_t type, value;
        std::memcpy(&type, bytes.data() + i, 8);
        std::memcpy(&value, bytes.data() + i + 8, 8);
        if (type == 0)
            break;
        out[type] = value;
    }
    return out;
}

std::map<std::uint64_t, std::uint64_t> read_auxv(pid_t pid)
{
    auto bytes = read_file(fmt::format("/proc/{}/auxv", pid));
    return bytes ? parse_auxv(*bytes) : std::map<std::uint64_t, std::uint64_t>{};
}

std::string process_name(pid_t pid)
{
    if (auto st = read_status(pid))
        return st->name;
    return {};
}

}  // namespace tdctl::procfs
