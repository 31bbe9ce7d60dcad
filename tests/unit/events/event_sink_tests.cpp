// Text and JSON Lines sinks, written into an in-memory stream and read back.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <cmath>
#include <nlohmann/json.hpp>

#include "events/event_sink.hpp"
#include "events/json_format.hpp"

namespace ev = tdctl::events;

namespace {

// An open_memstream whose buffer is readable after each flush; the sinks
// flush per line, so reading without our own fflush also checks that.
class memory_stream {
public:
    memory_stream() : file_(open_memstream(&buf_, &size_)) { REQUIRE(file_ != nullptr); }
    ~memory_stream() {
        if (file_) std::fclose(file_);
        std::free(buf_);
    }
    memory_stream(const memory_stream&) = delete;
    memory_stream& operator=(const memory_stream&) = delete;

    std::FILE* file() { return file_; }
    std::string contents() const { return buf_ ? std::string(buf_, size_) : std::string{}; }

    std::vector<std::string> lines() const {
        std::vector<std::string> out;
        const std::string all = contents();
        std::size_t start = 0;
        while (start < all.size()) {
            const auto nl = all.find('\n', start);
            REQUIRE_MESSAGE(nl != std::string::npos, "output does not end in a newline: " << all);
            out.push_back(all.substr(start, nl - start));
            start = nl + 1;
        }
        return out;
    }

private:
    char* buf_ = nullptr;
    std::size_t size_ = 0;
    std::FILE* file_;
};

ev::event_message sample_create() {
    ev::event_message m;
    m.event = TD_CREATE;
    m.tid = tdctl::tid_t{1234};
    m.handle = tdctl::target_addr{0x7f12};
    m.data = 0x7f12;
    m.reporter = tdctl::tid_t{1230};
    m.time = 1.234567;
    m.name = "worker 1";
    return m;
}

std::vector<std::string> keys_of(const nlohmann::ordered_json& j) {
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    return keys;
}

// Strict UTF-8 check (RFC 3629: no overlongs, surrogates or values above
// U+10FFFF), independent of nlohmann and of printable_name.
bool is_valid_utf8(const std::string& s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        if (b < 0x80) {
            ++i;
            continue;
        }
        std::uint32_t cp = 0;
        std::size_t len = 0;
        if ((b & 0xe0) == 0xc0) {
            len = 2;
            cp = b & 0x1f;
        } else if ((b & 0xf0) == 0xe0) {
            len = 3;
            cp = b & 0x0f;
        } else if ((b & 0xf8) == 0xf0) {
            len = 4;
            cp = b & 0x07;
        } else {
            return false;
        }
        if (i + len > s.size()) return false;
        for (std::size_t k = 1; k < len; ++k) {
            const auto c = static_cast<unsigned char>(s[i + k]);
            if ((c & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (c & 0x3f);
        }
        const std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for_len[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += len;
    }
    return true;
}

const std::vector<std::string> event_keys = {"type", "event", "tid", "name", "handle", "data", "reporter", "time"};

}  // namespace

TEST_CASE("hex_addr is %p-like: lowercase, 0x, no padding") {
    CHECK(ev::hex_addr(0) == "0x0");
    CHECK(ev::hex_addr(1) == "0x1");
    CHECK(ev::hex_addr(0x7f12) == "0x7f12");
    CHECK(ev::hex_addr(0xABCDEF) == "0xabcdef");
    CHECK(ev::hex_addr(0x00007fffdeadbeefULL) == "0x7fffdeadbeef");
    CHECK(ev::hex_addr(0xffffffffffffffffULL) == "0xffffffffffffffff");
}

TEST_CASE("json_line: compact, one line, invalid UTF-8 replaced") {
    ev::json_record r;
    r["type"] = "thread";
    r["z"] = 1;
    r["a"] = std::string("bad\xff\xfe" "byte\nnl");
    const auto line = ev::json_line(r);
    REQUIRE(!line.empty());
    CHECK(line.back() == '\n');
    CHECK(line.find('\n') == line.size() - 1);
    CHECK(is_valid_utf8(line));
    const auto parsed = nlohmann::ordered_json::parse(line);
    CHECK(keys_of(parsed) == std::vector<std::string>{"type", "z", "a"});
    CHECK(parsed["a"].get<std::string>() == "bad\xef\xbf\xbd\xef\xbf\xbd" "byte\nnl");
}

TEST_CASE("JSON sink: exact line for the documented example") {
    memory_stream out;
    auto sink = ev::make_jsonl_sink(out.file());
    sink->write(sample_create());
    CHECK(out.contents() ==
          R"({"type":"event","event":"TD_CREATE","tid":1234,"name":"worker 1","handle":"0x7f12","data":"0x7f12","reporter":1230,"time":1.234567})"
          "\n");
}

TEST_CASE("a target in another PID namespace: its own TID beside the LWP, in JSON and text") {
    auto m = sample_create();
    m.ns_tid = 7;
    CHECK(ev::json_line(ev::event_to_json(m)) ==
          R"({"type":"event","event":"TD_CREATE","tid":1234,"ns_tid":7,"name":"worker 1","handle":"0x7f12","data":"0x7f12","reporter":1230,"time":1.234567})"
          "\n");
    CHECK(ev::format_event_text(m) ==
          "[   1.234567] TD_CREATE      tid 1234 ns-tid 7 (worker 1) handle 0x7f12 data 0x7f12 reporter 1230");
}

TEST_CASE("JSON sink: each line parses back with keys in order and the right values") {
    memory_stream out;
    auto sink = ev::make_jsonl_sink(out.file());

    auto a = sample_create();
    auto b = sample_create();
    b.event = TD_DEATH;
    b.tid = tdctl::tid_t{77};
    b.handle = tdctl::target_addr{0};
    b.data = 0xABCDEF0123ULL;
    b.reporter = tdctl::tid_t{0};
    b.time = 12.5000004;  // rounds to microseconds
    b.name = "";

    sink->write(a);
    REQUIRE(out.lines().size() == 1);  // visible without our own fflush
    sink->write(b);
    const auto lines = out.lines();
    REQUIRE(lines.size() == 2);

    const auto ja = nlohmann::ordered_json::parse(lines[0]);
    CHECK(keys_of(ja) == event_keys);
    CHECK(ja["type"] == "event");
    CHECK(ja["event"] == "TD_CREATE");
    CHECK(ja["tid"].is_number_integer());
    CHECK(ja["tid"] == 1234);
    CHECK(ja["reporter"] == 1230);
    CHECK(ja["handle"] == "0x7f12");
    CHECK(ja["time"].is_number());
    CHECK(ja["time"].get<double>() == doctest::Approx(1.234567).epsilon(1e-12));

    const auto jb = nlohmann::ordered_json::parse(lines[1]);
    CHECK(keys_of(jb) == event_keys);
    CHECK(jb["event"] == "TD_DEATH");
    CHECK(jb["tid"] == 77);
    CHECK(jb["name"] == "");
    CHECK(jb["handle"] == "0x0");
    CHECK(jb["data"] == "0xabcdef0123");
    CHECK(jb["reporter"] == 0);
    CHECK(lines[1].find("\"time\":12.5}") != std::string::npos);
}

TEST_CASE("JSON sink: unknown event numbers still print") {
    memory_stream out;
    auto m = sample_create();
    m.event = static_cast<td_event_e>(42);
    ev::make_jsonl_sink(out.file())->write(m);
    const auto j = nlohmann::ordered_json::parse(out.lines().at(0));
    CHECK(j["event"] == "TD_EVENT_42");
}

TEST_CASE("JSON sink: hostile thread names stay valid JSON on one line") {
    const std::vector<std::string> names = {
        "a b) c",
        R"(quote" back\slash)",
        "tab\there\nnewline",
        std::string("nul\0byte", 8),
        "bad \xff\xfe utf8",
        "trunc \xe2\x82",       // truncated 3-byte sequence
        "overlong \xc0\xaf",    // overlong '/'
        "surrogate \xed\xa0\x80",
        "ok \xc3\xa9\xe2\x82\xac",  // é €
    };
    memory_stream out;
    auto sink = ev::make_jsonl_sink(out.file());
    for (const auto& n : names) {
        auto m = sample_create();
        m.name = n;
        sink->write(m);
    }
    const auto lines = out.lines();
    REQUIRE(lines.size() == names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
        CAPTURE(i);
        CAPTURE(lines[i]);
        CHECK(is_valid_utf8(lines[i]));
        nlohmann::ordered_json j;
        REQUIRE_NOTHROW(j = nlohmann::ordered_json::parse(lines[i]));
        CHECK(keys_of(j) == event_keys);
        const auto name = j["name"].get<std::string>();
        if (is_valid_utf8(names[i])) {
            CHECK(name == names[i]);  // valid names survive byte for byte
        } else {
            CHECK(name.find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD stands in
        }
    }
}

TEST_CASE("text sink: one line with event name, tid, name, addresses") {
    memory_stream out;
    auto sink = ev::make_text_sink(out.file());
    sink->write(sample_create());
    const auto lines = out.lines();  // no fflush of ours: the sink flushed
    REQUIRE(lines.size() == 1);
    const auto& line = lines[0];
    CHECK(line == "[   1.234567] TD_CREATE      tid 1234 (worker 1) handle 0x7f12 data 0x7f12 reporter 1230");
    CHECK(line.find("TD_CREATE") != std::string::npos);
    CHECK(line.find("tid 1234") != std::string::npos);
    CHECK(line.find("(worker 1)") != std::string::npos);
}

TEST_CASE("text sink: columns align and optional parts are left out") {
    memory_stream out;
    auto sink = ev::make_text_sink(out.file());
    auto m = sample_create();
    m.event = TD_PRI_INHERIT;
    m.reporter = tdctl::tid_t{0};
    m.name = "";
    m.handle = tdctl::target_addr{0};
    m.time = 0;
    sink->write(m);
    m.event = TD_DEATH;
    m.tid = tdctl::tid_t{0};
    m.time = 123.4;
    sink->write(m);
    const auto lines = out.lines();
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == "[   0.000000] TD_PRI_INHERIT tid 1234 handle 0x0 data 0x7f12");
    CHECK(lines[1] == "[ 123.400000] TD_DEATH       tid ? handle 0x0 data 0x7f12");
    CHECK(lines[0].find("reporter") == std::string::npos);
}

TEST_CASE("text sink: a hostile name cannot break the line") {
    memory_stream out;
    auto m = sample_create();
    m.name = "evil\nname\x1b[31m \xff \\ \xc3\xa9";
    ev::make_text_sink(out.file())->write(m);
    const auto lines = out.lines();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("(evil\\x0aname\\x1b[31m \\xff \\\\ \xc3\xa9)") != std::string::npos);
}

TEST_CASE("printable_name") {
    CHECK(ev::printable_name("worker 1") == "worker 1");
    CHECK(ev::printable_name("a)b") == "a)b");
    CHECK(ev::printable_name("\xe2\x82\xac") == "\xe2\x82\xac");
    CHECK(ev::printable_name(std::string("x\0y", 3)) == "x\\x00y");
    CHECK(ev::printable_name("\x7f") == "\\x7f");
    CHECK(ev::printable_name("\xc2\x9b") == "\\xc2\\x9b");         // C1 control
    CHECK(ev::printable_name("\xe2\x82") == "\\xe2\\x82");         // truncated
    CHECK(ev::printable_name("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // surrogate
    CHECK(ev::printable_name("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
}

TEST_CASE("times print as their microseconds, not as 17 digits")
{
    // 0.003158 is one of the values nlohmann's float printer spells with 17
    // significant digits when given the nearest double.
    for (double t : {0.003158, 0.0031580000000000002, 1.234567, 12.5, 0.000001}) {
        std::string line = tdctl::events::json_line(tdctl::events::json_record(tdctl::events::json_seconds(t)));
        std::string text = line.substr(0, line.size() - 1);
        CHECK(text.size() <= 12);
        CHECK(std::abs(std::stod(text) - t) < 1e-9);
    }
}

TEST_CASE("an event with frames, a start routine and a lifetime: text lines and JSON fields") {
    auto m = sample_create();
    m.start_routine = tdctl::target_addr{0x401136};
    m.start_symbol = "worker_main";
    ev::stack_frame f0;
    f0.pc = tdctl::target_addr{0x7f00};
    f0.function = "__nptl_create_event";
    f0.module = "libc.so.6";
    ev::stack_frame f1;
    f1.pc = tdctl::target_addr{0x401200};
    f1.function = "spawn";
    f1.offset = 0x1c;
    f1.module = "prog";
    f1.file = "prog.c";
    f1.line = 42;
    m.frames = {f0, f1};
    CHECK(ev::format_event_text(m) ==
          "[   1.234567] TD_CREATE      tid 1234 (worker 1) handle 0x7f12 data 0x7f12 reporter 1230"
          " start 0x401136 (worker_main)\n"
          "  #0   0x7f00 in __nptl_create_event+0x0 (libc.so.6)\n"
          "  #1   0x401200 in spawn+0x1c (prog) at prog.c:42");
    const auto j = nlohmann::ordered_json::parse(ev::json_line(ev::event_to_json(m)));
    CHECK(j["startfunc"] == "0x401136");
    CHECK(j["startsym"] == "worker_main");
    REQUIRE(j["frames"].size() == 2);
    CHECK(j["frames"][0]["file"].is_null());
    CHECK(j["frames"][0]["line"].is_null());
    CHECK(j["frames"][1]["function"] == "spawn");
    CHECK(j["frames"][1]["offset"] == "0x1c");
    CHECK(j["frames"][1]["file"] == "prog.c");
    CHECK(j["frames"][1]["line"] == 42);
    CHECK_FALSE(j.contains("lifetime_ns"));

    auto d = sample_create();
    d.event = TD_DEATH;
    d.lifetime_ns = 1500000;
    CHECK(ev::format_event_text(d).ends_with(" reporter 1230 lifetime 0.001500 s"));
    const auto jd = nlohmann::ordered_json::parse(ev::json_line(ev::event_to_json(d)));
    CHECK(jd["lifetime_ns"] == 1500000);
    CHECK_FALSE(jd.contains("frames"));
    CHECK_FALSE(jd.contains("startfunc"));
}

TEST_CASE("event_json_line writes exactly what json_line(event_to_json) with a pid writes") {
    std::vector<ev::event_message> cases;
    auto m = sample_create();
    cases.push_back(m);
    m.ns_tid = 7;
    m.origin = "lwp-exit";
    m.lifetime_ns = 123456789;
    m.call_site = tdctl::target_addr{0x401234};
    m.time = 0.0031580000000001;
    cases.push_back(m);
    m.name = "we\"ird\\\n\xff\x01";  // escapes and invalid UTF-8
    m.start_routine = tdctl::target_addr{0x401136};
    m.start_symbol = "";
    cases.push_back(m);
    m.start_symbol = "ns::worker(int)";
    ev::stack_frame f;
    f.pc = tdctl::target_addr{0x7f00};
    f.function = "__nptl_create_event";
    f.module = "libc.so.6";
    m.frames = {f, f};
    m.event = TD_DEATH;
    m.time = 12345.5;
    cases.push_back(m);
    m = ev::event_message{};  // nothing set
    cases.push_back(m);
    for (int pid : {0, 4242}) {
        for (const auto& c : cases) {
            auto rec = ev::event_to_json(c);
            rec["pid"] = pid != 0 ? ev::json_record(pid) : ev::json_record(nullptr);
            CHECK(ev::event_json_line(c, pid) == ev::json_line(rec));
        }
    }
}
