#include "cmd/output.hpp"

#include <cerrno>
#include <unistd.h>

#include "base/clock.hpp"

namespace tdctl::cmd {

output::output(std::FILE* out, bool json)
    : out_(out),
      json_(json),
      sink_(json ? events::make_jsonl_sink(out, false) : events::make_text_sink(out, false)),
      terminal_(::isatty(::fileno(out)) == 1)
{
}

void output::flush()
{
    std::fflush(out_);
    note_write_error();
}

void output::end_line()
{
    if (bulk_depth_ == 0 && (deferred_depth_ == 0 || terminal_))
        std::fflush(out_);
    note_write_error();
}

void output::note_write_error()
{
    if (write_errno_ == 0 && std::ferror(out_) != 0)
        write_errno_ = errno != 0 ? errno : EIO;
}

void output::set_prompt_hooks(void (*before)(), void (*after)())
{
    before_ = before;
    after_ = after;
}

void output::stamp(events::json_record& rec) const
{
    if (!rec.contains("time"))
        rec["time"] = events::json_seconds(seconds_since_start());
    if (!rec.contains("pid"))
        rec["pid"] = pid_ != 0 ? events::json_record(pid_) : events::json_record(nullptr);
}

void output::event(const events::event_message& msg)
{
    if (json_) {
        // The one record a run prints per stop: written with no JSON tree.
        if (before_)
            before_();
        std::string line = events::event_json_line(msg, pid_);
        std::fwrite(line.data(), 1, line.size(), out_);
        end_line();
        if (after_)
            after_();
    } else {
        if (before_)
            before_();
        sink_->write(msg);
        end_line();
        if (after_)
            after_();
    }
    for (auto* o : observers_)
        o->write(msg);
}

void output::write_text(const std::string& text)
{
    if (before_)
        before_();
    // One write call per line: the run waker's flush never splits one.
    std::string line = text + '\n';
    std::fwrite(line.data(), 1, line.size(), out_);
    end_line();
    if (after_)
        after_();
}

void output::record(events::json_record rec, const std::string& text)
{
    if (json_) {
        if (before_)
            before_();
        stamp(rec);
        std::string line = events::json_line(rec);
        std::fwrite(line.data(), 1, line.size(), out_);
        end_line();
        if (after_)
            after_();
    } else if (!text.empty()) {
        write_text(text);
    }
}

void output::error(const std::string& code, const std::string& message)
{
    if (before_)
        before_();
    // What was printed before comes before the error, wherever each goes.
    flush();
    if (!records_on_stderr()) {
        std::fprintf(stderr, "tdctl: %s\n", message.c_str());
        std::fflush(stderr);
    }
    if (json_) {
        events::json_record rec;
        rec["type"] = "error";
        rec["error"] = code;
        rec["message"] = message;
        stamp(rec);
        events::write_json_line(out_, rec);
    }
    if (after_)
        after_();
}

void output::note(const std::string& text)
{
    if (records_on_stderr()) {
        events::json_record rec;
        rec["type"] = "note";
        rec["message"] = text;
        record(std::move(rec), {});
    } else if (json_) {
        if (before_)
            before_();
        flush();
        std::fprintf(stderr, "tdctl: %s\n", text.c_str());
        if (after_)
            after_();
    } else {
        write_text(text);
    }
}

}  // namespace tdctl::cmd
