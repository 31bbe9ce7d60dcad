#include "symbols/proc_maps.hpp"

#include <cerrno>
#include <charconv>
#include <optional>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/unique_fd.hpp"

namespace tdctl::symbols {

namespace {

constexpr std::string_view deleted_suffix = " (deleted)";

// A cursor over one maps line; every take_* returns nullopt on malformed input.
class line_reader {
public:
    explicit line_reader(std::string_view line) : rest_(line) {}

    std::optional<std::uint64_t> take_hex(char terminator)
    {
        std::uint64_t v = 0;
        auto [p, ec] = std::from_chars(rest_.data(), rest_.data() + rest_.size(), v, 16);
        if (ec != std::errc{} || p == rest_.data())
            return std::nullopt;
        rest_.remove_prefix(static_cast<std::size_t>(p - rest_.data()));
        if (terminator != '\0') {
            if (rest_.empty() || rest_.front() != terminator)
                return std::nullopt;
            rest_.remove_prefix(1);
        }
        return v;
    }

    std::optional<std::uint64_t> take_dec()
    {
        std::uint64_t v = 0;
        auto [p, ec] = std::from_chars(rest_.data(), rest_.data() + rest_.size(), v, 10);
        if (ec != std::errc{} || p == rest_.data())
            return std::nullopt;
        rest_.remove_prefix(static_cast<std::size_t>(p - rest_.data()));
        return v;
    }

    std::optional<std::string_view> take_word()
    {
        std::size_t n = rest_.find(' ');
        if (n == 0 || n == std::string_view::npos)
            return std::nullopt;
        std::string_view w = rest_.substr(0, n);
        rest_.remove_prefix(n);
        return w;
    }

    // Separator between fields: at least one space.
    bool skip_spaces(bool required)
    {
        std::size_t n = rest_.find_first_not_of(' ');
        if (n == std::string_view::npos)
            n = rest_.size();
        if (required && n == 0)
            return false;
        rest_.remove_prefix(n);
        return true;
    }

    std::string_view rest() const { return rest_; }

private:
    std::string_view rest_;
};

std::optional<map_entry> parse_line(std::string_view line)
{
    line_reader r(line);
    map_entry e;

    auto start = r.take_hex('-');
    auto end = r.take_hex('\0');
    if (!start || !end || *end < *start || !r.skip_spaces(true))
        return std::nullopt;
    e.start = *start;
    e.end = *end;

    auto perms = r.take_word();
    if (!perms || perms->size() != 4 || !r.skip_spaces(true))
        return std::nullopt;
    e.readable = (*perms)[0] == 'r';
    e.writable = (*perms)[1] == 'w';
    e.executable = (*perms)[2] == 'x';
    e.shared = (*perms)[3] == 's';

    auto offset = r.take_hex('\0');
    if (!offset || !r.skip_spaces(true))
        return std::nullopt;
    e.offset = *offset;

    auto major = r.take_hex(':');
    auto minor = r.take_hex('\0');
    if (!major || !minor || !r.skip_spaces(true))
        return std::nullopt;
    e.dev_major = static_cast<unsigned>(*major);
    e.dev_minor = static_cast<unsigned>(*minor);

    auto inode = r.take_dec();
    if (!inode)
        return std::nullopt;
    e.inode = *inode;

    // The path is everything after the padding, spaces included; the kernel
    // pads with spaces after the inode even when there is no path.
    std::string_view rest = r.rest();
    if (!rest.empty() && rest.front() != ' ')
        return std::nullopt;
    r.skip_spaces(false);
    std::string_view path = r.rest();
    if (path.ends_with(deleted_suffix)) {
        path.remove_suffix(deleted_suffix.size());
        e.deleted = true;
    }
    e.path = std::string(path);
    return e;
}

}  // namespace

std::vector<map_entry> parse_maps(std::string_view text, maps_lines which)
{
    std::vector<map_entry> out;
    const bool files_only = which == maps_lines::file_backed;
    while (!text.empty()) {
        std::size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (files_only && line.find('/') == std::string_view::npos)
            continue;
        if (auto e = parse_line(line); e && (!files_only || e->is_file_backed()))
            out.push_back(std::move(*e));
    }
    return out;
}

printed_path unmark_deleted(pid_t pid, std::string_view printed, std::uint64_t inode)
{
    if (!printed.ends_with(deleted_suffix))
        return {std::string(printed), false};
    // The target may live in another mount namespace: its root first.
    for (const std::string& p : {fmt::format("/proc/{}/root{}", pid, printed), std::string(printed)}) {
        struct stat st;
        if (inode != 0 && ::stat(p.c_str(), &st) == 0 && st.st_ino == inode)
            return {std::string(printed), false};
    }
    printed.remove_suffix(deleted_suffix.size());
    return {std::string(printed), true};
}

std::vector<map_entry> read_maps(pid_t pid, maps_lines which)
{
    std::string path = fmt::format("/proc/{}/maps", pid);
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.is_open())
        throw error::from_errno(errno, "opening " + path);

    // procfs files report size 0, so read until EOF.
    std::string text;
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw error::from_errno(errno, "reading " + path);
        }
        if (n == 0)
            break;
        text.append(buf, static_cast<std::size_t>(n));
    }
    std::vector<map_entry> maps = parse_maps(text, which);
    for (map_entry& e : maps) {
        if (!e.deleted)
            continue;
        printed_path p = unmark_deleted(pid, e.path + std::string(deleted_suffix), e.inode);
        e.path = std::move(p.path);
        e.deleted = p.deleted;
    }
    return maps;
}

}  // namespace tdctl::symbols
