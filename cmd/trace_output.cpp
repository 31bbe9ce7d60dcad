#include "cmd/trace_output.hpp"

#include <cerrno>
#include <cstring>
#include <sys/wait.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "events/chrome_trace.hpp"
#include "events/perfetto_trace.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::cmd {

namespace {

std::vector<events::lwp_seen> lwps_of(core::session& session)
{
    std::vector<events::lwp_seen> out;
    for (tid_t t : session.target().lwps())
        out.push_back({t.value, session.target().thread_name(t)});
    return out;
}

}  // namespace

std::optional<trace_format> parse_trace_format(std::string_view word)
{
    if (word == "perfetto" || word == "protobuf" || word == "proto")
        return trace_format::perfetto;
    if (word == "json")
        return trace_format::json;
    return std::nullopt;
}

trace_output::trace_output(std::string path, trace_format format) : path_(std::move(path)), format_(format)
{
    file_ = std::fopen(path_.c_str(), "wb");
    if (file_ == nullptr)
        throw error::from_errno(errno, fmt::format("cannot write the trace file {}", path_));
}

trace_output::~trace_output()
{
    if (file_ != nullptr)
        std::fclose(file_);
}

void trace_output::begin(core::session& session, double time)
{
    recorder_.emplace(session.target().pid(), procfs::process_name(session.target().pid()), time, lwps_of(session));
}

void trace_output::write(const events::event_message& msg)
{
    if (recorder_)
        recorder_->on_event(msg);
}

void trace_output::observe(core::session& session)
{
    if (!recorder_ || !session.is_alive())
        return;
    recorder_->observe(seconds_since_start(), lwps_of(session));
    if (auto name = procfs::process_name(session.target().pid()); !name.empty())
        recorder_->rename_process(std::move(name));
}

void trace_output::note_exit(int raw, double time)
{
    if (!recorder_)
        return;
    std::vector<events::trace_arg> args;
    if (WIFSIGNALED(raw))
        args.push_back(events::trace_arg::of_int("signal", WTERMSIG(raw)));
    else
        args.push_back(events::trace_arg::of_int("status", WEXITSTATUS(raw)));
    recorder_->process_instant(time, "exit", std::move(args));
}

bool trace_output::finish(double time, std::string& error)
{
    if (!recorder_ || file_ == nullptr)
        return true;
    auto model = recorder_->finish(time);
    recorder_.reset();
    const std::string bytes =
        format_ == trace_format::json ? events::chrome_trace_json(model) : events::perfetto_trace_bytes(model);
    const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size();
    const int write_errno = errno;
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    if (written && closed)
        return true;
    error = fmt::format("writing the trace file {} failed: {}", path_, std::strerror(written ? errno : write_errno));
    return false;
}

}  // namespace tdctl::cmd
