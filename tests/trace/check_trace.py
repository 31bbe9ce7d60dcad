"""Checks a `tdctl --trace` file against what tdctl printed.

Perfetto files are decoded with `protoc --decode=perfetto.protos.Trace`
against perfetto_subset.proto; Chrome JSON files are checked against
chrome_trace.schema.json (with the jsonschema module when it is installed)
and structurally. Used by trace_tests.py; every check raises CheckFailed.
"""
import ast
import json
import os
import subprocess
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "perfetto_subset.proto")
SCHEMA = os.path.join(HERE, "chrome_trace.schema.json")
CLOCK_MONOTONIC, CLOCK_BOOTTIME = 3, 6


class CheckFailed(Exception):
    pass


def expect(cond, message):
    if not cond:
        raise CheckFailed(message)


# ---------------------------------------------------------------- protobuf

def count_top_level_packets(data):
    """Field-1 (packet) entries of a Trace message, read with a wire-format
    reader of our own: protoc must decode exactly that many."""
    pos, count = 0, 0

    def varint():
        nonlocal pos
        shift, value = 0, 0
        while True:
            expect(pos < len(data), "truncated varint")
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while pos < len(data):
        key = varint()
        expect(key == (1 << 3 | 2), f"top-level field {key >> 3} wire type {key & 7}, not packet")
        length = varint()
        pos += length
        expect(pos <= len(data), "a packet runs past the end of the file")
        count += 1
    return count


def decode_text(path):
    with open(path, "rb") as f:
        result = subprocess.run(["protoc", f"--proto_path={HERE}", "--decode=perfetto.protos.Trace", PROTO],
                                stdin=f, capture_output=True, timeout=120)
    expect(result.returncode == 0, f"protoc --decode failed: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode()


def unquote(text):
    return ast.literal_eval("b" + text).decode("utf-8", errors="replace")


def parse_text_format(text):
    """protoc's text output as nested dicts: every field maps to a list."""
    root = defaultdict(list)
    stack = [root]
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
            continue
        expect(not line[0].isdigit(), f"unknown field (wrong field number?): {line}")
        if line.endswith("{"):
            child = defaultdict(list)
            stack[-1][line[:-1].strip()].append(child)
            stack.append(child)
            continue
        key, _, value = line.partition(": ")
        value = value.strip()
        if value.startswith('"'):
            parsed = unquote(value)
        elif value.lstrip("-").isdigit():
            parsed = int(value)
        elif value in ("true", "false"):
            parsed = value == "true"
        else:
            parsed = value  # an enum name or a bool
        stack[-1][key].append(parsed)
    expect(len(stack) == 1, "unbalanced braces in protoc output")
    return root


def one(msg, key, default=None):
    values = msg.get(key, [])
    expect(len(values) <= 1, f"{key} repeated")
    return values[0] if values else default


def annotations(event):
    out = {}
    for a in event.get("debug_annotations", []):
        name = one(a, "name")
        for k in ("bool_value", "uint_value", "int_value", "string_value", "pointer_value", "double_value"):
            if k in a:
                out[name] = one(a, k)
    return out


class Lifetime:
    def __init__(self, uuid, tid, name):
        self.uuid, self.tid, self.names = uuid, tid, [name]
        self.begin = self.end = None
        self.begin_args, self.end_args = {}, {}
        self.instants = []
        self.depth = 0
        self.slices = 0        # slices begun at depth 0 (the lifetime itself)
        self.nested = Counter()  # names of nested slices


def check_packets(packets):
    expect(packets, "no packets")
    first = packets[0]
    snapshot = one(first, "clock_snapshot")
    expect(snapshot is not None, "the first packet is not the clock snapshot")
    clocks = {one(c, "clock_id"): one(c, "timestamp") for c in snapshot["clocks"]}
    expect(CLOCK_MONOTONIC in clocks and CLOCK_BOOTTIME in clocks, f"clock snapshot has {clocks}")
    last = 0
    for p in packets:
        ts = one(p, "timestamp")
        expect(ts is not None and ts >= last, f"timestamps go back: {last} then {ts}")
        last = ts
        expect(one(p, "timestamp_clock_id") == CLOCK_MONOTONIC, "a packet not on CLOCK_MONOTONIC")
        expect(one(p, "trusted_packet_sequence_id") == 1, "a packet without sequence 1")


def track_descriptor(p, process, tracks):
    d = one(p, "track_descriptor")
    uuid = one(d, "uuid")
    if "process" in d:
        expect(process[0] is None, "two process tracks")
        process[0] = (uuid, one(one(d, "process"), "pid"))
        return
    thread = one(d, "thread")
    expect(thread is not None, f"track {uuid} is neither process nor thread")
    expect(process[0] is not None and one(d, "parent_uuid") == process[0][0], "thread track outside the process")
    name = one(thread, "thread_name", "")
    if uuid in tracks:
        expect(tracks[uuid].tid == one(thread, "tid"), f"track {uuid} changes its tid")
        tracks[uuid].names.append(name)
    else:
        tracks[uuid] = Lifetime(uuid, one(thread, "tid"), name)


def track_event(p, process, tracks, flows):
    ev = one(p, "track_event")
    uuid, kind, ts = one(ev, "track_uuid"), one(ev, "type"), one(p, "timestamp")
    for f in ev.get("flow_ids", []):
        flows[f][0] += 1
    for f in ev.get("terminating_flow_ids", []):
        flows[f][1] += 1
    if process[0] is not None and uuid == process[0][0]:
        expect(kind == "TYPE_INSTANT", "a slice on the process track")
        process.append((ts, annotations(ev)))
        return
    expect(uuid in tracks, f"event on undescribed track {uuid}")
    l = tracks[uuid]
    expect(l.end is None, f"an event on track {uuid} after its lifetime ended")
    if kind == "TYPE_SLICE_BEGIN":
        if l.depth == 0:
            expect(one(ev, "name") == "thread" and l.slices == 0, f"track {uuid}: a second top-level slice")
            l.slices, l.begin, l.begin_args = 1, ts, annotations(ev)
        else:
            l.nested[one(ev, "name")] += 1
        l.depth += 1
    elif kind == "TYPE_SLICE_END":
        expect(l.depth > 0, f"track {uuid}: an end without a begin")
        l.depth -= 1
        if l.depth == 0:
            l.end, l.end_args = ts, annotations(ev)
    else:
        expect(kind == "TYPE_INSTANT" and l.depth > 0, f"track {uuid}: an instant outside the lifetime")
        l.instants.append((ts, annotations(ev)))


def check_perfetto(path):
    """Decodes and checks the file; returns (pid, lifetimes by uuid, process-track instants)."""
    with open(path, "rb") as f:
        raw = f.read()
    expected_packets = count_top_level_packets(raw)
    tree = parse_text_format(decode_text(path))
    packets = tree.get("packet", [])
    expect(len(packets) == expected_packets, f"protoc decoded {len(packets)} of {expected_packets} packets")
    check_packets(packets)
    process, tracks, flows = [None], {}, defaultdict(lambda: [0, 0])
    for p in packets[1:]:
        if "track_descriptor" in p:
            track_descriptor(p, process, tracks)
        elif "track_event" in p:
            track_event(p, process, tracks, flows)
        else:
            raise CheckFailed(f"unexpected packet: {dict(p)}")
    expect(process[0] is not None, "no process track")
    for l in tracks.values():
        expect(l.slices == 1 and l.depth == 0 and l.end is not None, f"track {l.uuid} (tid {l.tid}) is not closed")
    for fid, (out, into) in flows.items():
        expect(out == 1 and into == 1, f"flow {fid} starts {out} and ends {into} times")
    check_one_track_per_lifetime(tracks)
    # Messages of a thread after its TD_DEATH (the agent's TD_CONCURRENCY)
    # are instants on the process track, with the exit.
    return process[0][1], tracks, process[1:]


def check_one_track_per_lifetime(tracks):
    by_tid = defaultdict(list)
    for l in tracks.values():
        by_tid[l.tid].append((l.begin, l.end))
    for tid, spans in by_tid.items():
        spans.sort()
        for (b0, e0), (b1, e1) in zip(spans, spans[1:]):
            expect(e0 <= b1, f"tid {tid}: two tracks alive at once ({b0}-{e0}, {b1}-{e1})")


def check_against_events(tracks, events, process_instants=()):
    """The trace holds what tdctl printed: one instant per event, one created
    lifetime per TD_CREATE, one ended by death per TD_DEATH, final names."""
    lifetimes = list(tracks.values())
    printed = Counter(e["event"] for e in events)
    instants = Counter(a.get("event") for l in lifetimes for _, a in l.instants)
    instants.update(a["event"] for _, a in process_instants if "event" in a)
    expect(+instants == +printed, f"instants {dict(instants)} != printed events {dict(printed)}")
    created = sum(1 for l in lifetimes if l.begin_args.get("begins", "").startswith("created"))
    ended = sum(1 for l in lifetimes if l.end_args.get("ends", "").startswith("ended"))
    expect(created == printed["TD_CREATE"], f"{created} created lifetimes, {printed['TD_CREATE']} TD_CREATE")
    expect(ended == printed["TD_DEATH"], f"{ended} lifetimes ended by death, {printed['TD_DEATH']} TD_DEATH")
    for l in lifetimes:
        deaths = [a for _, a in l.instants if a.get("event") == "TD_DEATH" and a.get("tid") == l.tid]
        if deaths:
            expect(l.names[-1] == deaths[-1]["name"],
                   f"tid {l.tid}: track named {l.names[-1]!r}, its TD_DEATH says {deaths[-1]['name']!r}")
    first = min(l.begin for l in lifetimes)
    last = max(l.end for l in lifetimes)
    for l in lifetimes:
        expect(not l.begin_args.get("alive_at_start") or l.begin == first, f"tid {l.tid}: alive at start, late")
        expect(not l.end_args.get("alive_at_end") or l.end == last, f"tid {l.tid}: alive at end, early")
    return created, ended


# ---------------------------------------------------------------- Chrome JSON

def check_chrome_json(path, events):
    with open(path) as f:
        doc = json.load(f)
    with open(SCHEMA) as f:
        schema = json.load(f)
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        try:
            jsonschema.validate(doc, schema)
        except jsonschema.ValidationError as e:
            raise CheckFailed(f"schema: {e.message} at {list(e.absolute_path)}")
    stacks, names = defaultdict(list), {}
    lifetimes, instants = 0, Counter()
    for e in doc["traceEvents"]:
        key = (e["pid"], e["tid"])
        if e["ph"] == "M":
            expect(isinstance(e["args"]["name"], str), "a name that is not a string")
            if e["name"] == "thread_name":
                expect(key not in names, f"two thread_name for {key}")
                names[key] = e["args"]["name"]
        elif e["ph"] == "B":
            expect(not stacks[key] or e["ts"] >= stacks[key][-1], f"{key}: a begin before its parent")
            lifetimes += not stacks[key]
            stacks[key].append(e["ts"])
        elif e["ph"] == "E":
            expect(stacks[key] and e["ts"] >= stacks[key][-1], f"{key}: an end before its begin")
            stacks[key].pop()
        elif e["ph"] == "i" and "event" in e["args"]:  # the others: process instants (exit)
            instants[e["args"]["event"]] += 1
    expect(all(not s for s in stacks.values()), "a slice never ends")
    printed = Counter(e["event"] for e in events)
    expect(+instants == +printed, f"instants {dict(instants)} != printed {dict(printed)}")
    return lifetimes, names
