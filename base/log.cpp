#include "base/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tdctl::log {

namespace {
bool initial_debug()
{
    const char* v = std::getenv("TDCTL_DEBUG");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}
bool g_debug = initial_debug();
void (*g_warning_writer)(const std::string&) = nullptr;
}  // namespace

void set_warning_writer(void (*writer)(const std::string& line)) { g_warning_writer = writer; }

bool debug_enabled() { return g_debug; }
void set_debug(bool on) { g_debug = on; }

void write_line(const std::string& line)
{
    std::fprintf(stderr, "tdctl: debug: %s\n", line.c_str());
}

void write_warning(const std::string& line)
{
    if (g_warning_writer != nullptr) {
        g_warning_writer(line);
        return;
    }
    std::fprintf(stderr, "tdctl: %s\n", line.c_str());
}

}  // namespace tdctl::log
