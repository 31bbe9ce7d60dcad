#include "events/trace_recorder.hpp"

#include <algorithm>
#include <unordered_set>

#include "base/clock.hpp"
#include "events/event_names.hpp"

namespace tdctl::events {

namespace {

// The process track's uuid; lifetimes count up from the next one.
constexpr std::uint64_t process_track_uuid = 1;

const char* start_text(lifetime_start s)
{
    switch (s) {
    case lifetime_start::created: return "created (TD_CREATE)";
    case lifetime_start::at_trace_start: return "alive when the trace began";
    case lifetime_start::first_seen: return "first seen alive (its creation was not watched)";
    }
    return "";
}

const char* end_text(lifetime_end e)
{
    switch (e) {
    case lifetime_end::death: return "ended (TD_DEATH)";
    case lifetime_end::at_trace_end: return "alive when the trace ended";
    case lifetime_end::gone: return "gone (its end was not watched; it ended before this time)";
    }
    return "";
}

}  // namespace

std::vector<trace_arg> event_args(const event_message& msg)
{
    std::vector<trace_arg> args;
    args.push_back(trace_arg::of_string("event", event_name(msg.event)));
    args.push_back(trace_arg::of_int("tid", msg.tid.value));
    if (msg.ns_tid)
        args.push_back(trace_arg::of_int("ns_tid", *msg.ns_tid));
    args.push_back(trace_arg::of_string("name", msg.name));
    args.push_back(trace_arg::of_pointer("handle", msg.handle.value));
    args.push_back(trace_arg::of_pointer("data", msg.data));
    args.push_back(trace_arg::of_int("reporter", msg.reporter.value));
    if (!msg.origin.empty())
        args.push_back(trace_arg::of_string("origin", msg.origin));
    if (!msg.call_site.is_null())
        args.push_back(trace_arg::of_pointer("call_site", msg.call_site.value));
    return args;
}

std::vector<trace_arg> trace_annotations(const trace_mark& m)
{
    std::vector<trace_arg> args = m.args;
    if (m.message) {
        auto fields = event_args(*m.message);
        args.insert(args.end(), std::make_move_iterator(fields.begin()), std::make_move_iterator(fields.end()));
    }
    return args;
}

std::vector<trace_arg> trace_annotations(const thread_lifetime& l, std::size_t index)
{
    const trace_mark& m = l.marks[index];
    std::vector<trace_arg> args;
    if (index == 0) {
        args.push_back(trace_arg::of_int("tid", l.tid));
        args.push_back(trace_arg::of_string("begins", start_text(l.start)));
        args.push_back(trace_arg::of_bool("alive_at_start", l.start == lifetime_start::at_trace_start));
    }
    auto own = trace_annotations(m);
    args.insert(args.end(), std::make_move_iterator(own.begin()), std::make_move_iterator(own.end()));
    if (index + 1 == l.marks.size() && index != 0 && m.what == trace_mark::kind::end) {
        args.push_back(trace_arg::of_string("ends", end_text(l.end)));
        args.push_back(trace_arg::of_string("final_name", l.last_name));
        args.push_back(trace_arg::of_bool("alive_at_end", l.end == lifetime_end::at_trace_end));
    }
    return args;
}

trace_recorder::trace_recorder(pid_t pid, std::string process_name, double time, const std::vector<lwp_seen>& lwps)
{
    model_.pid = pid;
    model_.process_name = std::move(process_name);
    model_.process_uuid = process_track_uuid;
    const auto clocks = read_clock_pair();
    model_.monotonic_at_begin_ns = clocks.monotonic_ns;
    model_.boottime_at_begin_ns = clocks.boottime_ns;
    model_.begin_ns = monotonic_ns_at(time);
    for (const auto& l : lwps)
        begin_lifetime(l.tid, l.name, model_.begin_ns, lifetime_start::at_trace_start, {});
}

void trace_recorder::add_mark(thread_lifetime& l, trace_mark mark)
{
    if (!l.marks.empty())
        mark.ts_ns = std::max(mark.ts_ns, l.marks.back().ts_ns);
    l.marks.push_back(std::move(mark));
}

thread_lifetime* trace_recorder::lifetime_of(pid_t tid)
{
    auto it = open_.find(tid);
    return it == open_.end() ? nullptr : &model_.lifetimes[it->second.index];
}

std::size_t trace_recorder::begin_lifetime(pid_t tid, std::string name, std::uint64_t ts, lifetime_start how,
                                           std::vector<trace_arg> args)
{
    thread_lifetime l;
    l.uuid = process_track_uuid + 1 + model_.lifetimes.size();
    l.tid = tid;
    l.reuse = lifetimes_per_tid_[tid]++;
    l.first_name = name;
    l.last_name = std::move(name);
    l.start = how;
    add_mark(l, trace_mark{trace_mark::kind::begin, ts, "thread", std::move(args), 0, 0, std::nullopt});
    model_.lifetimes.push_back(std::move(l));
    open_[tid] = open_state{model_.lifetimes.size() - 1, std::nullopt, std::nullopt, std::nullopt};
    return model_.lifetimes.size() - 1;
}

void trace_recorder::close_waits(open_state& st, std::uint64_t ts)
{
    auto& l = model_.lifetimes[st.index];
    const std::vector<trace_arg> unfinished{trace_arg::of_bool("unfinished", true)};
    if (st.sleep)
        add_mark(l, trace_mark{trace_mark::kind::end, ts, {}, unfinished, 0, 0, std::nullopt});
    if (st.lock)
        add_mark(l, trace_mark{trace_mark::kind::end, ts, {}, unfinished, 0, 0, std::nullopt});
    st.sleep.reset();
    st.lock.reset();
}

void trace_recorder::end_lifetime(pid_t tid, std::uint64_t ts, lifetime_end how, std::vector<trace_arg> args)
{
    auto it = open_.find(tid);
    if (it == open_.end())
        return;
    close_waits(it->second, ts);
    auto& l = model_.lifetimes[it->second.index];
    l.end = how;
    add_mark(l, trace_mark{trace_mark::kind::end, ts, {}, std::move(args), 0, 0, std::nullopt});
    open_.erase(it);
}

void trace_recorder::rename_if_changed(pid_t tid, const std::string& name, std::uint64_t ts)
{
    auto* l = lifetime_of(tid);
    if (l == nullptr || name.empty() || name == l->last_name)
        return;
    l->last_name = name;
    add_mark(*l, trace_mark{trace_mark::kind::rename, ts, name, {}, 0, 0, std::nullopt});
}

void trace_recorder::on_create(const event_message& msg, std::uint64_t ts)
{
    const pid_t tid = msg.tid.value;
    std::uint64_t flow = 0;
    if (tid == 0) {
        place_instant(msg, ts);
        return;
    }
    if (auto* l = lifetime_of(tid)) {
        // Listed between its clone and this report: the same thread.
        if (l->start == lifetime_start::first_seen && l->marks.size() == 1) {
            l->start = lifetime_start::created;
            place_instant(msg, ts);
            return;
        }
        // A reused TID whose previous thread's end was not seen.
        end_lifetime(tid, ts, lifetime_end::gone, {});
    }
    if (lifetime_of(msg.reporter.value) != nullptr)
        flow = next_flow_++;
    std::vector<trace_arg> args{trace_arg::of_int("creator", msg.reporter.value),
                                trace_arg::of_pointer("handle", msg.handle.value)};
    auto index = begin_lifetime(tid, msg.name, ts, lifetime_start::created, std::move(args));
    model_.lifetimes[index].marks.front().flow_in = flow;
    // The instant goes on the creator's track, with the flow to the new
    // lifetime; without a creator track, on the new lifetime itself.
    auto& where = flow != 0 ? *lifetime_of(msg.reporter.value) : model_.lifetimes[index];
    add_mark(where, trace_mark{trace_mark::kind::instant, ts, event_name(msg.event), {}, flow, 0, msg});
}

void trace_recorder::place_instant(const event_message& msg, std::uint64_t ts)
{
    trace_mark mark{trace_mark::kind::instant, ts, event_name(msg.event), {}, 0, 0, msg};
    thread_lifetime* l = msg.reporter.value != 0 ? lifetime_of(msg.reporter.value) : nullptr;
    if (l == nullptr)
        l = lifetime_of(msg.tid.value);
    if (l != nullptr)
        add_mark(*l, std::move(mark));
    else
        model_.process_marks.push_back(std::move(mark));
}

void trace_recorder::on_wait_event(const event_message& msg, std::uint64_t ts)
{
    auto it = open_.find(msg.tid.value);
    if (it == open_.end())
        return;
    auto& st = it->second;
    auto& l = model_.lifetimes[st.index];
    const std::uint64_t object = msg.data;
    std::vector<trace_arg> args{trace_arg::of_pointer("object", object)};
    switch (msg.event) {
    case TD_LOCK_TRY:
        close_waits(st, ts);  // a lock tried while another wait is open: that one was left unseen
        st.tried = tried_lock{object, ts};
        break;
    case TD_SLEEP:
        st.tried.reset();  // not this object's (begin_tried_lock_wait took a matching one)
        if (st.sleep)
            close_waits(st, ts);
        st.sleep = open_wait{object, false};
        add_mark(l, trace_mark{trace_mark::kind::begin, ts, "sleep", std::move(args), 0, 0, std::nullopt});
        break;
    case TD_TIMEOUT:
        if (st.sleep && st.sleep->object == object)
            st.sleep->timed_out = true;
        break;
    case TD_READY:
        st.tried.reset();
        on_ready(st, object, ts);
        break;
    default:
        break;
    }
}

void trace_recorder::begin_tried_lock_wait(const event_message& msg)
{
    auto it = open_.find(msg.tid.value);
    if (it == open_.end() || !it->second.tried || it->second.tried->object != msg.data)
        return;
    auto& st = it->second;
    std::vector<trace_arg> args{trace_arg::of_pointer("object", msg.data)};
    add_mark(model_.lifetimes[st.index],
             trace_mark{trace_mark::kind::begin, st.tried->ts, "lock wait", std::move(args), 0, 0, std::nullopt});
    st.lock = open_wait{msg.data, false};
    st.tried.reset();
}

void trace_recorder::on_ready(open_state& st, std::uint64_t object, std::uint64_t ts)
{
    auto& l = model_.lifetimes[st.index];
    if (st.sleep && st.sleep->object == object) {
        const bool timed_out = st.sleep->timed_out;
        // The slice is named at its begin; a timed-out sleep gets its own name.
        if (timed_out)
            for (auto m = l.marks.rbegin(); m != l.marks.rend(); ++m)
                if (m->what == trace_mark::kind::begin && m->name == "sleep") {
                    m->name = "sleep (timed out)";
                    break;
                }
        add_mark(l, trace_mark{trace_mark::kind::end, ts, {}, {trace_arg::of_bool("timed_out", timed_out)}, 0, 0, std::nullopt});
        st.sleep.reset();
    }
    if (st.lock && st.lock->object == object && !st.sleep) {
        add_mark(l, trace_mark{trace_mark::kind::end, ts, {}, {}, 0, 0, std::nullopt});
        st.lock.reset();
    }
}

void trace_recorder::on_event(const event_message& msg)
{
    const std::uint64_t ts = monotonic_ns_at(msg.time);
    const pid_t tid = msg.tid.value;
    if (msg.event == TD_CREATE) {
        on_create(msg, ts);
        return;
    }
    if (msg.event == TD_DEATH && tid != 0 && lifetime_of(tid) == nullptr)
        begin_lifetime(tid, msg.name, ts, lifetime_start::first_seen, {});
    rename_if_changed(tid, msg.name, ts);
    if (msg.event == TD_SLEEP)
        begin_tried_lock_wait(msg);
    place_instant(msg, ts);
    if (msg.event == TD_DEATH)
        end_lifetime(tid, ts, lifetime_end::death, {});
    else
        on_wait_event(msg, ts);
}

void trace_recorder::observe(double time, const std::vector<lwp_seen>& lwps)
{
    const std::uint64_t ts = monotonic_ns_at(time);
    std::unordered_set<pid_t> alive;
    for (const auto& l : lwps) {
        alive.insert(l.tid);
        if (lifetime_of(l.tid) == nullptr)
            begin_lifetime(l.tid, l.name, ts, lifetime_start::first_seen, {});
        else
            rename_if_changed(l.tid, l.name, ts);
    }
    std::vector<pid_t> gone;
    for (const auto& [tid, st] : open_)
        if (!alive.contains(tid))
            gone.push_back(tid);
    std::sort(gone.begin(), gone.end());
    for (pid_t tid : gone)
        end_lifetime(tid, ts, lifetime_end::gone, {});
}

void trace_recorder::process_instant(double time, std::string name, std::vector<trace_arg> args)
{
    model_.process_marks.push_back(
        trace_mark{trace_mark::kind::instant, monotonic_ns_at(time), std::move(name), std::move(args), 0, 0, std::nullopt});
}

trace_model trace_recorder::finish(double time)
{
    const std::uint64_t ts = monotonic_ns_at(time);
    std::vector<pid_t> open;
    for (const auto& [tid, st] : open_)
        open.push_back(tid);
    std::sort(open.begin(), open.end());
    for (pid_t tid : open)
        end_lifetime(tid, ts, lifetime_end::at_trace_end, {});
    model_.end_ns = ts;
    for (const auto& l : model_.lifetimes)
        if (!l.marks.empty())
            model_.end_ns = std::max(model_.end_ns, l.marks.back().ts_ns);
    trace_model out = std::move(model_);
    model_ = trace_model{};
    open_.clear();
    return out;
}

}  // namespace tdctl::events
