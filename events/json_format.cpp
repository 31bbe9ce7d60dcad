#include "events/json_format.hpp"

#include <cmath>

#include <fmt/format.h>

namespace tdctl::events {

std::string hex_addr(std::uint64_t value) {
    return fmt::format("{:#x}", value);
}

double json_seconds(double seconds) {
    if (!std::isfinite(seconds)) return seconds;
    return std::round(seconds * 1e6) / 1e6;
}

std::string json_line(const json_record& record) {
    // indent -1 = compact; ensure_ascii off keeps valid UTF-8 names readable.
    std::string line = record.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    line.push_back('\n');
    return line;
}

bool write_json_line(std::FILE* out, const json_record& record) {
    const std::string line = json_line(record);
    const bool written = std::fwrite(line.data(), 1, line.size(), out) == line.size();
    const bool flushed = std::fflush(out) == 0;
    return written && flushed;
}

}  // namespace tdctl::events
