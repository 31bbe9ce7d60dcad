// `--trace FILE`: records the session as a timeline (events/trace_recorder)
// and writes it when the session ends, as a Perfetto protobuf trace or,
// with `--trace-format json`, as Chrome trace JSON. Nothing is written
// while the target runs: each printed event message is one update of the
// recorder's model, the file is written once at the end.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "core/session/session.hpp"
#include "events/event_sink.hpp"
#include "events/trace_recorder.hpp"

namespace tdctl::cmd {

enum class trace_format { perfetto, json };

/// "perfetto" (also "protobuf", "proto") or "json"; std::nullopt otherwise.
std::optional<trace_format> parse_trace_format(std::string_view word);

class trace_output final : public events::event_sink {
public:
    /// Creates (truncates) `path` now, so that a path that cannot be
    /// written fails before the target is touched; throws tdctl::error
    /// (os, errno) with the path in its message.
    trace_output(std::string path, trace_format format);
    ~trace_output() override;
    trace_output(const trace_output&) = delete;
    trace_output& operator=(const trace_output&) = delete;

    /// The trace begins: the session's LWPs (with /proc comm names) at `time`
    /// (seconds since tdctl started).
    void begin(core::session& session, double time);
    /// Every printed event message (output's observer).
    void write(const events::event_message& msg) override;
    /// The session's LWPs now: threads born or gone unwatched, new names.
    void observe(core::session& session);
    /// The target exited with raw wait status `raw` at `time`.
    void note_exit(int raw, double time);
    /// Ends the trace at `time` and writes the file; false with `error` set
    /// when it cannot be written. Later calls do nothing.
    bool finish(double time, std::string& error);

    const std::string& path() const { return path_; }

private:
    std::string path_;
    trace_format format_;
    std::FILE* file_ = nullptr;
    std::optional<events::trace_recorder> recorder_;
};

}  // namespace tdctl::cmd
