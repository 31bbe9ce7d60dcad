#include "events/event_sink.hpp"

#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "events/event_names.hpp"

namespace tdctl::events {

namespace {

// Length of the well-formed UTF-8 sequence starting at s[i] (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF), or 0 if it is not one.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char lead = byte(i);
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
        len = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        len = 3;
        if (lead == 0xe0) lo = 0xa0;
        if (lead == 0xed) hi = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        len = 4;
        if (lead == 0xf0) lo = 0x90;
        if (lead == 0xf4) hi = 0x8f;
    } else {
        return 0;
    }
    if (i + len > s.size()) return 0;
    if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (std::size_t k = 2; k < len; ++k) {
        if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
    }
    return len;
}

void append_escaped_byte(std::string& out, unsigned char b) {
    out += fmt::format("\\x{:02x}", b);
}

class text_sink final : public event_sink {
public:
    text_sink(std::FILE* out, bool flush_each_line) : out_(out), flush_(flush_each_line) {}

    void write(const event_message& msg) override {
        std::string line = format_event_text(msg);
        line.push_back('\n');
        std::fwrite(line.data(), 1, line.size(), out_);
        if (flush_) std::fflush(out_);
    }

private:
    std::FILE* out_;
    bool flush_;
};

class jsonl_sink final : public event_sink {
public:
    jsonl_sink(std::FILE* out, bool flush_each_line) : out_(out), flush_(flush_each_line) {}

    void write(const event_message& msg) override {
        std::string line = json_line(event_to_json(msg));
        std::fwrite(line.data(), 1, line.size(), out_);
        if (flush_) std::fflush(out_);
    }

private:
    std::FILE* out_;
    bool flush_;
};

// Width of the longest event name ("TD_PRI_INHERIT", "TD_CONCURRENCY"), so the
// columns after it line up.
constexpr int event_name_width = 14;

}  // namespace

std::string printable_name(std::string_view name) {
    std::string out;
    out.reserve(name.size());
    std::size_t i = 0;
    while (i < name.size()) {
        const auto b = static_cast<unsigned char>(name[i]);
        if (b < 0x80) {
            if (b < 0x20 || b == 0x7f) {
                append_escaped_byte(out, b);
            } else if (b == '\\') {
                out += "\\\\";
            } else {
                out.push_back(static_cast<char>(b));
            }
            ++i;
            continue;
        }
        const std::size_t len = utf8_sequence_length(name, i);
        if (len == 0) {
            append_escaped_byte(out, b);
            ++i;
            continue;
        }
        // U+0080..U+009F are C1 controls; some terminals act on them.
        if (b == 0xc2 && static_cast<unsigned char>(name[i + 1]) < 0xa0) {
            append_escaped_byte(out, b);
            append_escaped_byte(out, static_cast<unsigned char>(name[i + 1]));
        } else {
            out.append(name.substr(i, len));
        }
        i += len;
    }
    return out;
}

std::string format_frame_text(int index, const stack_frame& f) {
    std::string text = fmt::format("  #{:<3} {} in {}", index, hex_addr(f.pc.value),
                                   f.function.empty() ? std::string("??") : printable_name(f.function));
    if (!f.function.empty()) text += fmt::format("+{:#x}", f.offset);
    text += fmt::format(" ({})", f.module.empty() ? std::string("?") : printable_name(f.module));
    if (!f.file.empty()) text += fmt::format(" at {}:{}", printable_name(f.file), f.line);
    return text;
}

json_record frame_to_json(const stack_frame& f) {
    json_record jf;
    jf["pc"] = hex_addr(f.pc.value);
    jf["function"] = f.function.empty() ? json_record(nullptr) : json_record(f.function);
    jf["offset"] = hex_addr(f.offset);
    jf["module"] = f.module;
    jf["file"] = f.file.empty() ? json_record(nullptr) : json_record(f.file);
    jf["line"] = f.file.empty() ? json_record(nullptr) : json_record(f.line);
    return jf;
}

std::string format_event_text(const event_message& msg) {
    std::string line = fmt::format("[{:>11.6f}] {:<{}} tid ", msg.time, event_name(msg.event), event_name_width);
    if (msg.tid.value != 0) {
        line += fmt::format("{}", msg.tid.value);
    } else {
        line += '?';
    }
    if (msg.ns_tid) line += fmt::format(" ns-tid {}", *msg.ns_tid);
    if (!msg.name.empty()) line += fmt::format(" ({})", printable_name(msg.name));
    line += fmt::format(" handle {:#x} data {:#x}", msg.handle.value, msg.data);
    if (msg.reporter.value != 0) line += fmt::format(" reporter {}", msg.reporter.value);
    if (!msg.start_routine.is_null()) {
        line += fmt::format(" start {:#x}", msg.start_routine.value);
        if (!msg.start_symbol.empty()) line += fmt::format(" ({})", printable_name(msg.start_symbol));
    }
    if (msg.lifetime_ns) line += fmt::format(" lifetime {:.6f} s", static_cast<double>(*msg.lifetime_ns) / 1e9);
    if (!msg.origin.empty()) line += fmt::format(" [{}]", msg.origin);
    int n = 0;
    for (const auto& f : msg.frames) line += "\n" + format_frame_text(n++, f);
    return line;
}

json_record event_to_json(const event_message& msg) {
    json_record record;
    record["type"] = "event";
    record["event"] = event_name(msg.event);
    record["tid"] = msg.tid.value;
    if (msg.ns_tid) record["ns_tid"] = *msg.ns_tid;
    record["name"] = msg.name;
    record["handle"] = hex_addr(msg.handle.value);
    record["data"] = hex_addr(msg.data);
    record["reporter"] = msg.reporter.value;
    record["time"] = json_seconds(msg.time);
    if (!msg.origin.empty()) record["origin"] = msg.origin;
    if (!msg.start_routine.is_null()) {
        record["startfunc"] = hex_addr(msg.start_routine.value);
        record["startsym"] = msg.start_symbol.empty() ? json_record(nullptr) : json_record(msg.start_symbol);
    }
    if (msg.lifetime_ns) record["lifetime_ns"] = *msg.lifetime_ns;
    if (!msg.frames.empty()) {
        json_record list = json_record::array();
        for (const auto& f : msg.frames) list.push_back(frame_to_json(f));
        record["frames"] = list;
    }
    if (!msg.call_site.is_null()) record["call_site"] = hex_addr(msg.call_site.value);
    return record;
}

namespace {

// One JSON object written straight into a line, members in call order: the
// text json_line() would give for the same members, with no tree built.
class json_object_line {
public:
    json_object_line() {
        out_.reserve(256);
        out_ += '{';
    }
    void key(const char* name) {
        out_ += out_.size() <= 1 ? "\"" : ",\"";
        out_ += name;
        out_ += "\":";
    }
    template <typename T>
    void number(T v) { fmt::format_to(std::back_inserter(out_), "{}", v); }
    void hex(std::uint64_t v) { fmt::format_to(std::back_inserter(out_), "\"{:#x}\"", v); }
    void string(const std::string& text) { append_json_string(out_, text); }
    void value(const json_record& v) { append_json_value(out_, v); }
    void null() { out_ += "null"; }
    /// The object closed, with its newline.
    std::string finish() && {
        out_ += "}\n";
        return std::move(out_);
    }

private:
    std::string out_;
};

// The members every event line has, in event_to_json()'s order.
void append_identity(json_object_line& line, const event_message& msg) {
    line.key("type");
    line.string("event");
    line.key("event");
    line.string(event_name(msg.event));
    line.key("tid");
    line.number(msg.tid.value);
    if (msg.ns_tid) {
        line.key("ns_tid");
        line.number(*msg.ns_tid);
    }
    line.key("name");
    line.string(msg.name);
    line.key("handle");
    line.hex(msg.handle.value);
    line.key("data");
    line.hex(msg.data);
    line.key("reporter");
    line.number(msg.reporter.value);
    line.key("time");
    if (double t = json_seconds(msg.time); std::isfinite(t))
        line.number(t);
    else
        line.null();
}

// The members a line has only when the message carries them.
void append_when_set(json_object_line& line, const event_message& msg) {
    if (!msg.origin.empty()) {
        line.key("origin");
        line.string(msg.origin);
    }
    if (!msg.start_routine.is_null()) {
        line.key("startfunc");
        line.hex(msg.start_routine.value);
        line.key("startsym");
        if (msg.start_symbol.empty())
            line.null();
        else
            line.string(msg.start_symbol);
    }
    if (msg.lifetime_ns) {
        line.key("lifetime_ns");
        line.number(*msg.lifetime_ns);
    }
    if (!msg.frames.empty()) {
        line.key("frames");
        json_record list = json_record::array();
        for (const auto& f : msg.frames) list.push_back(frame_to_json(f));
        line.value(list);
    }
    if (!msg.call_site.is_null()) {
        line.key("call_site");
        line.hex(msg.call_site.value);
    }
}

}  // namespace

std::string event_json_line(const event_message& msg, int pid) {
    json_object_line line;
    append_identity(line, msg);
    append_when_set(line, msg);
    line.key("pid");
    if (pid != 0)
        line.number(pid);
    else
        line.null();
    return std::move(line).finish();
}

std::unique_ptr<event_sink> make_text_sink(std::FILE* out, bool flush_each_line) {
    return std::make_unique<text_sink>(out, flush_each_line);
}

std::unique_ptr<event_sink> make_jsonl_sink(std::FILE* out, bool flush_each_line) {
    return std::make_unique<jsonl_sink>(out, flush_each_line);
}

}  // namespace tdctl::events
