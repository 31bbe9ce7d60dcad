#include "events/chrome_trace.hpp"

#include <fmt/format.h>

#include "events/json_format.hpp"
#include "events/trace_recorder.hpp"

namespace tdctl::events {

namespace {

// A later lifetime of a reused TID gets a tid of its own above every real one.
constexpr std::int64_t reused_tid_base = 1000000000;

double to_us(std::uint64_t ns)
{
    return static_cast<double>(ns) / 1000.0;
}

json_record args_of(const std::vector<trace_arg>& args)
{
    json_record out = json_record::object();
    for (const auto& a : args) {
        switch (a.type) {
        case trace_arg::kind::uint: out[a.name] = a.u; break;
        case trace_arg::kind::sint: out[a.name] = a.i; break;
        case trace_arg::kind::string: out[a.name] = a.s; break;
        case trace_arg::kind::pointer: out[a.name] = hex_addr(a.u); break;
        case trace_arg::kind::boolean: out[a.name] = a.u != 0; break;
        }
    }
    return out;
}

std::int64_t json_tid(const thread_lifetime& l)
{
    return l.reuse == 0 ? l.tid : reused_tid_base + static_cast<std::int64_t>(l.uuid);
}

json_record metadata(const char* what, pid_t pid, std::int64_t tid, const std::string& name)
{
    return json_record{{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

json_record mark_event(const trace_model& model, std::int64_t tid, const trace_mark& m,
                       const std::vector<trace_arg>& args)
{
    json_record e;
    e["ph"] = m.what == trace_mark::kind::begin ? "B" : m.what == trace_mark::kind::end ? "E" : "i";
    if (m.what != trace_mark::kind::end) {
        e["name"] = m.name;
        e["cat"] = "tdctl";
    }
    if (m.what == trace_mark::kind::instant)
        e["s"] = "t";
    e["ts"] = to_us(m.ts_ns);
    e["pid"] = model.pid;
    e["tid"] = tid;
    e["args"] = args_of(args);
    return e;
}

void add_lifetime(const trace_model& model, const thread_lifetime& l, json_record& events)
{
    const std::int64_t tid = json_tid(l);
    std::string name = l.reuse == 0 ? l.last_name : fmt::format("{} (tid {}, lifetime {})", l.last_name, l.tid,
                                                                 l.reuse + 1);
    events.push_back(metadata("thread_name", model.pid, tid, name));
    for (std::size_t i = 0; i < l.marks.size(); ++i)
        if (l.marks[i].what != trace_mark::kind::rename)
            events.push_back(mark_event(model, tid, l.marks[i], trace_annotations(l, i)));
}

}  // namespace

std::string chrome_trace_json(const trace_model& model)
{
    json_record events = json_record::array();
    events.push_back(metadata("process_name", model.pid, model.pid, model.process_name));
    for (const auto& l : model.lifetimes)
        add_lifetime(model, l, events);
    for (const auto& m : model.process_marks) {
        auto e = mark_event(model, model.pid, m, trace_annotations(m));
        e["s"] = "p";
        events.push_back(std::move(e));
    }
    json_record doc;
    doc["traceEvents"] = std::move(events);
    doc["displayTimeUnit"] = "ns";
    doc["otherData"] = {{"producer", "tdctl"}, {"clock", "CLOCK_MONOTONIC"}, {"pid", model.pid}};
    return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace tdctl::events
