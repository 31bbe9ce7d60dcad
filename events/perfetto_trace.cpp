#include "events/perfetto_trace.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "events/protobuf_writer.hpp"
#include "events/trace_recorder.hpp"

namespace tdctl::events {

namespace {

// Field numbers (google/perfetto protos/perfetto/trace/...).
namespace trace_f { constexpr std::uint32_t packet = 1; }
namespace packet_f {
constexpr std::uint32_t clock_snapshot = 6, timestamp = 8, sequence_id = 10, track_event = 11,
                        sequence_flags = 13, timestamp_clock_id = 58, track_descriptor = 60;
}
namespace clock_snapshot_f { constexpr std::uint32_t clocks = 1, primary_trace_clock = 2; }
namespace clock_f { constexpr std::uint32_t clock_id = 1, timestamp = 2; }
namespace track_f { constexpr std::uint32_t uuid = 1, name = 2, process = 3, thread = 4, parent_uuid = 5; }
namespace process_f { constexpr std::uint32_t pid = 1, process_name = 6; }
namespace thread_f { constexpr std::uint32_t pid = 1, tid = 2, thread_name = 5; }
namespace event_f {
constexpr std::uint32_t debug_annotations = 4, type = 9, track_uuid = 11, categories = 22, name = 23, flow_ids = 47,
                        terminating_flow_ids = 48;
}
namespace annotation_f {
constexpr std::uint32_t bool_value = 2, uint_value = 3, int_value = 4, string_value = 6, pointer_value = 7,
                        name = 10;
}
// BuiltinClock (protos/perfetto/common/builtin_clock.proto).
constexpr std::uint64_t clock_monotonic = 3, clock_boottime = 6;
// TrackEvent.Type.
constexpr std::uint64_t slice_begin = 1, slice_end = 2, instant = 3;
// TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED.
constexpr std::uint64_t incremental_state_cleared = 1;
constexpr std::uint64_t sequence_id = 1;

struct timed_packet {
    std::uint64_t ts;
    proto_message packet;
};

proto_message packet_at(std::uint64_t ts)
{
    proto_message p;
    p.varint(packet_f::timestamp, ts);
    p.varint(packet_f::timestamp_clock_id, clock_monotonic);
    p.varint(packet_f::sequence_id, sequence_id);
    return p;
}

proto_message annotation(const trace_arg& a)
{
    proto_message m;
    m.bytes(annotation_f::name, a.name);
    switch (a.type) {
    case trace_arg::kind::uint: m.varint(annotation_f::uint_value, a.u); break;
    case trace_arg::kind::sint: m.varint(annotation_f::int_value, static_cast<std::uint64_t>(a.i)); break;
    case trace_arg::kind::string: m.bytes(annotation_f::string_value, a.s); break;
    case trace_arg::kind::pointer: m.varint(annotation_f::pointer_value, a.u); break;
    case trace_arg::kind::boolean: m.varint(annotation_f::bool_value, a.u != 0 ? 1 : 0); break;
    }
    return m;
}

proto_message clock_snapshot_packet(const trace_model& model)
{
    proto_message boot, mono, snapshot;
    boot.varint(clock_f::clock_id, clock_boottime).varint(clock_f::timestamp, model.boottime_at_begin_ns);
    mono.varint(clock_f::clock_id, clock_monotonic).varint(clock_f::timestamp, model.monotonic_at_begin_ns);
    snapshot.message(clock_snapshot_f::clocks, boot).message(clock_snapshot_f::clocks, mono);
    snapshot.varint(clock_snapshot_f::primary_trace_clock, clock_monotonic);
    proto_message p;
    // The snapshot's own timestamp is on the clock it defines.
    p.varint(packet_f::timestamp, std::min(model.begin_ns, model.monotonic_at_begin_ns));
    p.varint(packet_f::timestamp_clock_id, clock_monotonic);
    p.varint(packet_f::sequence_id, sequence_id);
    p.varint(packet_f::sequence_flags, incremental_state_cleared);
    p.message(packet_f::clock_snapshot, snapshot);
    return p;
}

proto_message process_descriptor_packet(const trace_model& model)
{
    proto_message process, track;
    process.varint(process_f::pid, static_cast<std::uint64_t>(model.pid));
    process.bytes(process_f::process_name, model.process_name);
    track.varint(track_f::uuid, model.process_uuid).message(track_f::process, process);
    return packet_at(model.begin_ns).message(packet_f::track_descriptor, track);
}

proto_message thread_descriptor_packet(const trace_model& model, const thread_lifetime& l, std::uint64_t ts,
                                       const std::string& name)
{
    proto_message thread, track;
    thread.varint(thread_f::pid, static_cast<std::uint64_t>(model.pid));
    thread.varint(thread_f::tid, static_cast<std::uint64_t>(l.tid));
    thread.bytes(thread_f::thread_name, name);
    track.varint(track_f::uuid, l.uuid).varint(track_f::parent_uuid, model.process_uuid);
    track.message(track_f::thread, thread);
    return packet_at(ts).message(packet_f::track_descriptor, track);
}

proto_message event_packet(std::uint64_t track_uuid, const trace_mark& m, const std::vector<trace_arg>& args)
{
    proto_message ev;
    ev.varint(event_f::type, m.what == trace_mark::kind::begin ? slice_begin
                             : m.what == trace_mark::kind::end ? slice_end
                                                               : instant);
    ev.varint(event_f::track_uuid, track_uuid);
    if (m.what != trace_mark::kind::end) {
        ev.bytes(event_f::categories, "tdctl");
        ev.bytes(event_f::name, m.name);
    }
    for (const auto& a : args)
        ev.message(event_f::debug_annotations, annotation(a));
    if (m.flow_out != 0)
        ev.fixed64(event_f::flow_ids, m.flow_out);
    if (m.flow_in != 0)
        ev.fixed64(event_f::terminating_flow_ids, m.flow_in);
    return packet_at(m.ts_ns).message(packet_f::track_event, ev);
}

// Every packet of one lifetime, in its own order: its descriptor, then its marks.
void add_lifetime(const trace_model& model, const thread_lifetime& l, std::vector<timed_packet>& out)
{
    if (l.marks.empty())
        return;
    out.push_back({l.marks.front().ts_ns, thread_descriptor_packet(model, l, l.marks.front().ts_ns, l.first_name)});
    for (std::size_t i = 0; i < l.marks.size(); ++i) {
        const auto& m = l.marks[i];
        if (m.what == trace_mark::kind::rename)
            out.push_back({m.ts_ns, thread_descriptor_packet(model, l, m.ts_ns, m.name)});
        else
            out.push_back({m.ts_ns, event_packet(l.uuid, m, trace_annotations(l, i))});
    }
}

}  // namespace

std::string perfetto_trace_bytes(const trace_model& model)
{
    std::vector<timed_packet> packets;
    packets.push_back({model.begin_ns, process_descriptor_packet(model)});
    for (const auto& l : model.lifetimes)
        add_lifetime(model, l, packets);
    for (const auto& m : model.process_marks)
        packets.push_back({m.ts_ns, event_packet(model.process_uuid, m, trace_annotations(m))});
    // One time order for the whole file; a lifetime's own order is kept
    // for equal times (descriptor before its first event, inner slices
    // ending before outer ones).
    std::stable_sort(packets.begin(), packets.end(),
                     [](const timed_packet& a, const timed_packet& b) { return a.ts < b.ts; });
    proto_message trace;
    trace.message(trace_f::packet, clock_snapshot_packet(model));
    for (const auto& p : packets)
        trace.message(trace_f::packet, p.packet);
    return trace.data();
}

}  // namespace tdctl::events
