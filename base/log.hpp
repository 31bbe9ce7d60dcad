// Debug logging to stderr, off unless enabled (tdctl --debug, or the
// environment variable TDCTL_DEBUG=1).
#pragma once

#include <fmt/format.h>

namespace tdctl::log {

bool debug_enabled();
void set_debug(bool on);
void write_line(const std::string& line);
/// A line the user sees whatever the debug setting: "tdctl: <line>" on stderr
/// (something tdctl could not do and carried on without, e.g. in a destructor).
void warning_line(const std::string& line);

template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args)
{
    warning_line(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args)
{
    if (debug_enabled())
        write_line(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tdctl::log
