#include "events/json_format.hpp"

#include <cmath>
#include <cstdint>
#include <iterator>

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
// form (0.003158 comes out as 0.0031580000000000002); fmt's is. Scalars and
// plain ASCII strings are written directly (a record has ~20 of them and a
// command may print thousands of records); anything needing escapes goes
// through nlohmann, which also replaces invalid UTF-8.
void append_string(std::string& out, const std::string& text) {
    constexpr auto replace = nlohmann::ordered_json::error_handler_t::replace;
    bool plain = true;
    for (unsigned char c : text)
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            plain = false;
            break;
        }
    if (plain) {
        out += '"';
        out += text;
        out += '"';
    } else {
        out += json_record(text).dump(-1, ' ', false, replace);
    }
}

void append_json(std::string& out, const json_record& v) {
    switch (v.type()) {
    case nlohmann::ordered_json::value_t::number_float: {
        double d = v.get<double>();
        out += std::isfinite(d) ? fmt::format("{}", d) : std::string("null");
        break;
    }
    case nlohmann::ordered_json::value_t::number_integer:
        fmt::format_to(std::back_inserter(out), "{}", v.get<std::int64_t>());
        break;
    case nlohmann::ordered_json::value_t::number_unsigned:
        fmt::format_to(std::back_inserter(out), "{}", v.get<std::uint64_t>());
        break;
    case nlohmann::ordered_json::value_t::boolean:
        out += v.get<bool>() ? "true" : "false";
        break;
    case nlohmann::ordered_json::value_t::null:
        out += "null";
        break;
    case nlohmann::ordered_json::value_t::string:
        append_string(out, v.get_ref<const std::string&>());
        break;
    case nlohmann::ordered_json::value_t::object: {
        out += '{';
        bool first = true;
        for (const auto& [key, value] : v.items()) {
            if (!first) out += ',';
            first = false;
            append_string(out, key);
            out += ':';
            append_json(out, value);
        }
        out += '}';
        break;
    }
    case nlohmann::ordered_json::value_t::array: {
        out += '[';
        bool first = true;
        for (const auto& value : v) {
            if (!first) out += ',';
            first = false;
            append_json(out, value);
        }
        out += ']';
        break;
    }
    default:
        out += v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        break;
    }
}

}  // namespace

void append_json_string(std::string& out, const std::string& text) {
    append_string(out, text);
}

void append_json_value(std::string& out, const json_record& value) {
    append_json(out, value);
}

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
