// The JSON Lines conventions every tdctl record follows ("event" here;
// "thread", "error", "exit" in cmd/): one compact object per line, keys in
// insertion order, addresses as "0x..." strings, times as seconds, and output
// that stays valid UTF-8 whatever bytes the target handed us.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace tdctl::events {

/// A record under construction; ordered so keys print in the order they were set.
using json_record = nlohmann::ordered_json;

/// Lowercase hex with a 0x prefix and no padding, like %p: "0x7f12", "0x0".
std::string hex_addr(std::uint64_t value);

/// Seconds rounded to whole microseconds, so a time prints as 1.234567 and
/// not 1.2345670000000001; the text output shows the same resolution.
double json_seconds(double seconds);

/// The record as one line: compact dump with invalid UTF-8 replaced by
/// U+FFFD (nlohmann's error_handler_t::replace), then '\n'.
std::string json_line(const json_record& record);

/// Appends `text` as a JSON string: plain ASCII as it is, anything else
/// escaped as json_line() does (invalid UTF-8 replaced by U+FFFD).
void append_json_string(std::string& out, const std::string& text);
/// Appends `value` as json_line() writes it.
void append_json_value(std::string& out, const json_record& value);

/// Writes json_line(record) and flushes, because the reader may be a pipe
/// read live. Returns false if the stream reported an error.
bool write_json_line(std::FILE* out, const json_record& record);

}  // namespace tdctl::events
