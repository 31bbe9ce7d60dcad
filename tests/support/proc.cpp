#include "tests/support/proc.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/unique_fd.hpp"

namespace tdctl::test {

std::optional<std::string> read_text_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad())
        return std::nullopt;
    return text.str();
}

std::vector<pid_t> task_tids(pid_t pid)
{
    std::vector<pid_t> tids;
    std::error_code ec;
    std::filesystem::directory_iterator it(fmt::format("/proc/{}/task", pid), ec);
    if (ec)
        return tids;
    for (const auto& entry : it) {
        std::string name = entry.path().filename().string();
        pid_t tid = 0;
        auto [p, err] = std::from_chars(name.data(), name.data() + name.size(), tid);
        if (err == std::errc{} && p == name.data() + name.size())
            tids.push_back(tid);
    }
    std::sort(tids.begin(), tids.end());
    return tids;
}

std::optional<pid_t> tracer_pid(pid_t pid)
{
    auto status = read_text_file(fmt::format("/proc/{}/status", pid));
    if (!status)
        return std::nullopt;
    std::istringstream lines(*status);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.starts_with("TracerPid:"))
            return static_cast<pid_t>(std::stol(line.substr(10)));
    }
    return std::nullopt;
}

std::optional<char> parse_stat_state(std::string_view stat_line)
{
    auto close = stat_line.rfind(')');
    if (close == std::string_view::npos || close + 2 >= stat_line.size() || stat_line[close + 1] != ' ')
        return std::nullopt;
    return stat_line[close + 2];
}

std::optional<char> proc_state(pid_t pid)
{
    auto stat = read_text_file(fmt::format("/proc/{}/stat", pid));
    return stat ? parse_stat_state(*stat) : std::nullopt;
}

std::optional<char> task_state(pid_t pid, pid_t tid)
{
    auto stat = read_text_file(fmt::format("/proc/{}/task/{}/stat", pid, tid));
    return stat ? parse_stat_state(*stat) : std::nullopt;
}

std::optional<std::string> task_comm(pid_t pid, pid_t tid)
{
    auto comm = read_text_file(fmt::format("/proc/{}/task/{}/comm", pid, tid));
    if (comm && !comm->empty() && comm->back() == '\n')
        comm->pop_back();
    return comm;
}

std::vector<std::uint8_t> read_proc_mem(pid_t pid, std::uint64_t addr, std::size_t len)
{
    std::string path = fmt::format("/proc/{}/mem", pid);
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.is_open())
        throw error::from_errno(errno, "open " + path);
    std::vector<std::uint8_t> bytes(len);
    std::size_t done = 0;
    while (done < len) {
        ssize_t n = ::pread(fd.get(), bytes.data() + done, len - done, static_cast<off_t>(addr + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;  // EIO: unmapped from here on
        done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    return bytes;
}

std::vector<mapping> parse_maps(std::string_view text)
{
    std::vector<mapping> maps;
    std::size_t line_no = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string line(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        ++line_no;
        if (line.empty())
            continue;
        // start-end perms offset dev inode [path]; the path may hold spaces.
        mapping m;
        char perms[8] = {};
        unsigned long long start = 0, end = 0, offset = 0, inode = 0;
        unsigned dev_major = 0, dev_minor = 0;
        int path_at = -1;
        if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &offset, &dev_major,
                        &dev_minor, &inode, &path_at) < 7)
            throw std::runtime_error(fmt::format("maps line {} is malformed: {}", line_no, line));
        m.start = start;
        m.end = end;
        m.perms = perms;
        m.offset = offset;
        if (path_at > 0 && static_cast<std::size_t>(path_at) < line.size())
            m.path = line.substr(static_cast<std::size_t>(path_at));
        maps.push_back(std::move(m));
    }
    return maps;
}

std::vector<mapping> proc_maps(pid_t pid)
{
    auto text = read_text_file(fmt::format("/proc/{}/maps", pid));
    return text ? parse_maps(*text) : std::vector<mapping>{};
}

}  // namespace tdctl::test
