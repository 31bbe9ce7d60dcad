// A trace_model as a Perfetto protobuf trace: a `Trace` message, i.e. a
// stream of TracePacket fields (field 1), packets in timestamp order.
// Field numbers are those of google/perfetto's protos/perfetto/trace/
// (trace_packet.proto, clock_snapshot.proto, track_event/track_event.proto,
// track_descriptor.proto, process_descriptor.proto, thread_descriptor.proto,
// debug_annotation.proto); tests/trace/perfetto_subset.proto holds the same
// subset, and the tests decode every file with `protoc --decode` against it.
#pragma once

#include <string>

#include "events/trace_model.hpp"

namespace tdctl::events {

/// The whole trace: a clock snapshot (CLOCK_BOOTTIME and CLOCK_MONOTONIC,
/// MONOTONIC the primary trace clock), the process track, one thread track
/// per lifetime (re-described with the new thread_name at each rename),
/// then TrackEvents: each lifetime a slice "thread", waits as nested slices,
/// event messages as instants with their fields as debug annotations, and a
/// flow from each TD_CREATE instant to the lifetime it began. Every packet
/// has a CLOCK_MONOTONIC timestamp (ns) and sequence 1.
std::string perfetto_trace_bytes(const trace_model& model);

}  // namespace tdctl::events
