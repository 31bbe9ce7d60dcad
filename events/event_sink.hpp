// Where drained event messages go: a human line, or one JSON object per line.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "events/event_message.hpp"
#include "events/json_format.hpp"

namespace tdctl::events {

/// Receives each drained message. Implementations print and flush; they do
/// not throw except std::bad_alloc (a failed write is not the event loop's
/// problem: the stream keeps its error flag for whoever owns it).
class event_sink {
public:
    virtual ~event_sink() = default;
    virtual void write(const event_message& msg) = 0;
};

/// Text, one line per message (and one per frame of its stack), columns
/// aligned (time right-aligned to µs, event name padded to the longest one):
/// "[   1.234567] TD_CREATE      tid 1234 (worker 1) handle 0x7f12 data 0x7f12 reporter 1230".
/// The name part is left out when the name is empty, "reporter N" when the
/// reporter is 0 (a manual getmsg); tid 0 (unknown) prints as "tid ?".
/// TD_CREATE adds " start 0xADDR (symbol)", TD_DEATH " lifetime S s", and
/// each frame of a stack follows on a line of its own (format_frame_text).
/// `out` is borrowed, not closed; each line is flushed unless
/// flush_each_line is false (the caller flushes).
std::unique_ptr<event_sink> make_text_sink(std::FILE* out, bool flush_each_line = true);

/// JSON Lines: {"type":"event","event":"TD_CREATE","tid":N,"name":"…",
/// "handle":"0x…","data":"0x…","reporter":N,"time":S}; flushed per line
/// unless flush_each_line is false (the caller flushes).
/// Keys always present and in this order; reporter is 0 for a manual getmsg.
/// Then, only when set: "ns_tid" (after tid), "origin", "call_site" (TD_CREATE).
/// `out` is borrowed, not closed.
std::unique_ptr<event_sink> make_jsonl_sink(std::FILE* out, bool flush_each_line = true);

/// The message as the JSON Lines sink prints it (without the newline), for
/// callers that embed or post-process event records.
json_record event_to_json(const event_message& msg);

/// The same record as one JSON line, with "pid" last (`pid` 0: null), as
/// json_line() of event_to_json() with that "pid" added would write it, but
/// with no JSON tree built: the line of every event `watch` prints.
std::string event_json_line(const event_message& msg, int pid);

/// The message as the text sink prints it, without the trailing newline.
std::string format_event_text(const event_message& msg);

/// One frame as text: "  #N   0xPC in FUNCTION+0xOFF (MODULE) at FILE:LINE";
/// "??" without a symbol, "?" without a module, no "at" part without
/// debug info. `index` is the frame's depth (0 innermost).
std::string format_frame_text(int index, const stack_frame& frame);

/// One frame as JSON: {"pc","function" (null if none),"offset","module",
/// "file" and "line" (null without debug info)}.
json_record frame_to_json(const stack_frame& frame);

/// A thread name made safe for one terminal line: valid UTF-8 is kept,
/// control characters, backslashes and invalid bytes become \xNN / "\\".
std::string printable_name(std::string_view name);

}  // namespace tdctl::events
