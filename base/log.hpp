// Debug logging to stderr, off unless enabled (tdctl --debug, or the
// environment variable TDCTL_DEBUG=1).
#pragma once

#include <fmt/format.h>

namespace tdctl::log {

bool debug_enabled();
void set_debug(bool on);
void write_line(const std::string& line);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args)
{
    if (debug_enabled())
        write_line(fmt::format(f, std::forward<Args>(args)...));
}

/// Writes "tdctl: <line>" to stderr, whether or not debugging is on, or
/// hands the line to the writer set_warning_writer() installed.
void write_warning(const std::string& line);

/// Where warnings go instead of stderr (the JSON records, when those are on
/// stderr themselves); nullptr puts back stderr.
void set_warning_writer(void (*writer)(const std::string& line));

/// A line every user sees on stderr, "tdctl: <message>": something tdctl could
/// not do and carried on without (a task that did not stop, a failed detach).
template <typename... Args>
void warning(fmt::format_string<Args...> f, Args&&... args)
{
    write_warning(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tdctl::log
