// Everything tdctl prints: human text, or one JSON object per line (--json),
// to stdout, stderr (--json in launch mode: the program keeps stdout) or the
// -o file. Errors also go to stderr as one human line, unless the records
// themselves go there. Every JSON record has "type", "time" and "pid".
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "events/event_message.hpp"
#include "events/event_sink.hpp"
#include "events/json_format.hpp"

namespace tdctl::cmd {

class output {
public:
    /// `out` is stdout or the -o file (not owned when it is stdout).
    output(std::FILE* out, bool json);

    bool is_json() const { return json_; }
    /// The target's PID for the "pid" of records that have none of their
    /// own; 0 (JSON null) while there is no target.
    void set_pid(pid_t pid) { pid_ = pid; }
    /// False once a write to the output failed (a full disk, a closed pipe):
    /// the session should end, and tdctl exit 2.
    bool ok() const { return std::ferror(out_) == 0; }
    /// The errno of the first failed write (EPIPE, ENOSPC, ...), or 0.
    int write_errno() const { return write_errno_; }
    std::FILE* stream() const { return out_; }

    /// An event message (the events/ sinks' format); then every observer
    /// gets it too, so what they count is exactly what was printed.
    void event(const events::event_message& msg);

    /// `observer` gets every event message printed from now on (the trace
    /// recorder, the summary). Borrowed: it must outlive this output or be
    /// removed first.
    void add_observer(events::event_sink* observer) { observers_.push_back(observer); }
    void remove_observer(events::event_sink* observer) { std::erase(observers_, observer); }

    /// A record in JSON mode; `text` in text mode (a newline is added). Either
    /// may be empty to print nothing in that mode.
    void record(events::json_record rec, const std::string& text);

    /// A record with two renderings (records.hpp: `json()` and `text()`):
    /// only the one this output writes is built.
    template <typename Record>
    void print(const Record& r)
    {
        if (json_)
            record(r.json(), {});
        else
            record({}, r.text());
    }

    /// A line only the text form has (a table's column headings).
    void heading(const std::string& text)
    {
        if (!json_)
            record({}, text);
    }

    /// An error: stderr gets "tdctl: <message>"; in JSON mode the output also
    /// gets {"type":"error","error":code,"message":...}. `code` is a td_err_e
    /// name, an errno name, or a word such as "usage".
    void error(const std::string& code, const std::string& message);

    /// A note for people (stderr in JSON mode, the output in text mode); a
    /// `note` record when the JSON records go to stderr themselves.
    void note(const std::string& text);

    /// Adds "time" (now) and "pid" (set_pid's; null without a target) to a
    /// record that has none.
    void stamp(events::json_record& rec) const;

    /// While a command prints many rows (rusage, lwpinfo), records are written
    /// without a flush each; the guard's end flushes once.
    class bulk {
    public:
        explicit bulk(output& o) : o_(o) { ++o_.bulk_depth_; }
        ~bulk()
        {
            if (--o_.bulk_depth_ == 0)
                std::fflush(o_.out_);
        }
        bulk(const bulk&) = delete;
        bulk& operator=(const bulk&) = delete;

    private:
        output& o_;
    };

    /// Writes out what is buffered (also done when tdctl is about to sleep
    /// in the wait loop, and at exit).
    void flush();
    /// Writes out what the stream buffers, touching nothing else: safe from
    /// another thread while this one prints (stdio locks the stream). A
    /// failed write is noted by the next line or flush() here.
    void flush_buffered() { std::fflush(out_); }

    /// While tdctl runs the target (run_loop::run_until), lines are kept in
    /// the stream's buffer and written out before tdctl sleeps, when the
    /// buffer is full, and at the guard's end — one write per batch of stops
    /// instead of one per line, so a hit costs no write of its own. A
    /// terminal still gets every line at once.
    class deferred {
    public:
        explicit deferred(output& o) : o_(o) { ++o_.deferred_depth_; }
        ~deferred()
        {
            if (--o_.deferred_depth_ == 0)
                o_.flush();
        }
        deferred(const deferred&) = delete;
        deferred& operator=(const deferred&) = delete;

    private:
        output& o_;
    };

    /// A line from the REPL's prompt handling may be on the screen: printing
    /// clears it first and asks for a redraw afterwards.
    void set_prompt_hooks(void (*before)(), void (*after)());

private:
    void write_text(const std::string& text);
    /// The JSON records go to stderr, with the human lines that would go there.
    bool records_on_stderr() const { return json_ && out_ == stderr; }
    std::FILE* out_;
    bool json_;
    std::unique_ptr<events::event_sink> sink_;
    std::vector<events::event_sink*> observers_;
    void (*before_)() = nullptr;
    void (*after_)() = nullptr;
    int bulk_depth_ = 0;
    int deferred_depth_ = 0;
    bool terminal_;
    /// After a line: flushes it unless a bulk or deferred guard holds it.
    void end_line();
    pid_t pid_ = 0;
    int write_errno_ = 0;
    void note_write_error();
};

}  // namespace tdctl::cmd
