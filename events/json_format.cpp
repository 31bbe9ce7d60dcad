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

namespace {

// nlohmann's float printer (Grisu2) is not always the shortest round-trip
// form (0.003158 comes out as 0.0031580000000000002); fmt's is. Everything
// else is nlohmann's own serialization.
void append_json(std::string& out, const json_record& v) {
    constexpr auto replace = nlohmann::ordered_json::error_handler_t::replace;
    if (v.is_number_float()) {
        double d = v.get<double>();
        out += std::isfinite(d) ? fmt::format("{}", d) : std::string("null");
    } else if (v.is_object()) {
        out += '{';
        bool first = true;
        for (const auto& [key, value] : v.items()) {
            if (!first) out += ',';
            first = false;
            out += json_record(key).dump(-1, ' ', false, replace);
            out += ':';
            append_json(out, value);
        }
        out += '}';
    } else if (v.is_array()) {
        out += '[';
        bool first = true;
        for (const auto& value : v) {
            if (!first) out += ',';
            first = false;
            append_json(out, value);
        }
        out += ']';
    } else {
        out += v.dump(-1, ' ', false, replace);
    }
}

}  // namespace

std::string json_line(const json_record& record) {
    // Compact; invalid UTF-8 in names is replaced, valid UTF-8 kept readable.
    std::string line;
    append_json(line, record);
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
