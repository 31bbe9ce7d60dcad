#!/usr/bin/env python3
"""End-to-end tests of `tdctl --trace` and the event summary: the real tdctl
on fixture programs (and node, java), its printed events compared with the
trace file (check_trace.py) and with the fixture's own record.

usage: trace_tests.py --tdctl PATH --fixtures DIR CASE
CASE: launch | json | attach | agent | node | java | locks. Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_trace  # noqa: E402
from check_trace import CheckFailed, expect  # noqa: E402

SKIP = 77
TIMEOUT = 90


def run_tdctl(args, tdctl, timeout=TIMEOUT):
    """Runs tdctl --json -o FILE ARGS (a launched program keeps stdout and
    stderr to itself); returns (exit status, JSON records)."""
    with tempfile.NamedTemporaryFile(prefix="tdctl-records-", suffix=".jsonl") as out:
        result = subprocess.run([tdctl, "--json", "-o", out.name] + args, capture_output=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
        with open(out.name) as f:
            records = [json.loads(line) for line in f if line.strip()]
    if result.returncode != 0:
        sys.stderr.write(result.stderr.decode(errors="replace"))
    return result.returncode, records


def events_of(records):
    return [r for r in records if r["type"] == "event"]


def read_record(path):
    facts = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                facts.append(line.split())
    return facts


def site_counts(facts):
    """Threads per creating function, from the fixture's "thread ... site F" lines."""
    return Counter(f[4] for f in facts if f[0] == "thread" and len(f) >= 5 and f[3] == "site")


def check_summary(records, events, command, record_sites=None, skip_sites=()):
    """The summary's counts equal the events printed; its call sites equal the
    fixture's record (by the function the call site is in)."""
    heads = [r for r in records if r["type"] == "summary" and r["command"] == command]
    expect(len(heads) == 1, f"{len(heads)} '{command}' summaries")
    head = heads[0]
    printed = Counter(e["event"] for e in events)
    expect(head["messages"] == len(events), f"summary counts {head['messages']} messages, {len(events)} printed")
    expect(head["events"] == dict(printed), f"summary per type {head['events']} != printed {dict(printed)}")
    expect(head["created"] == printed["TD_CREATE"] and head["ended"] == printed["TD_DEATH"], "created/ended")
    sites = [r for r in records if r["type"] == "summary_call_site" and r["command"] == command]
    expect(sum(s["created"] for s in sites) == printed["TD_CREATE"] or len(sites) == 10, "call site total")
    if record_sites is None:
        return sites
    by_function = Counter()
    for s in sites:
        expect(s["call_site"] is not None and s["symbol"], f"call site not found or not symbolized: {s}")
        by_function[s["symbol"].split("+")[0]] += s["created"]
    expected = Counter({k: v for k, v in record_sites.items() if k not in skip_sites})
    expect(by_function == expected, f"summary per call site {dict(by_function)} != record {dict(expected)}")
    return sites


def case_launch(opts, tmp, fmt="perfetto"):
    trace, record = os.path.join(tmp, "t.trace"), os.path.join(tmp, "record")
    fixture = os.path.join(opts.fixtures, "sites")
    status, records = run_tdctl(["--trace", trace, "--trace-format", fmt, "--", fixture, "--record", record,
                                 "3", "5", "2", "2"], opts.tdctl)
    expect(status == 0, f"tdctl exited {status}")
    events = events_of(records)
    facts = read_record(record)
    threads = sum(1 for f in facts if f[0] == "thread")
    printed = Counter(e["event"] for e in events)
    expect(printed["TD_CREATE"] == threads and printed["TD_DEATH"] == threads,
           f"{dict(printed)} for {threads} threads in the record")
    check_summary(records, events, "watch", site_counts(facts))
    if fmt == "json":
        lifetimes, names = check_trace.check_chrome_json(trace, events)
        expect(lifetimes == threads + 1, f"{lifetimes} lifetimes for {threads} threads and main")
        expect(sum(1 for n in names.values() if n == "b-worker") == 5, f"names {sorted(names.values())}")
        return
    _, tracks, on_process = check_trace.check_perfetto(trace)
    check_trace.check_against_events(tracks, events, on_process)
    expect(len(tracks) == threads + 1, f"{len(tracks)} tracks for {threads} threads and main")
    renamed = [l for l in tracks.values() if l.names[-1] == "b-worker"]
    expect(len(renamed) == 5 and all(len(l.names) >= 2 for l in renamed), "b-worker renames")


def case_attach(opts, tmp):
    trace, record = os.path.join(tmp, "t.trace"), os.path.join(tmp, "record")
    fixture = subprocess.Popen([os.path.join(opts.fixtures, "sites"), "--record", record, "--wait-start",
                                "3", "5", "2", "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        ready = fixture.stdout.readline().decode().split()
        expect(ready[:1] == ["ready"], f"fixture said {ready}")
        # 2 * (3 + 5 + 1 + 2) messages: every thread made after the go byte.
        proc = subprocess.Popen([opts.tdctl, "--json", "--trace", trace, "-p", ready[1], "-e",
                                 "watch --count 22 --for 30", "-e", "summary"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        first = proc.stdout.readline()
        expect(json.loads(first)["type"] == "attached", f"tdctl said {first!r}")
        time.sleep(0.5)  # the watch arms right after the attach
        fixture.stdin.write(b"g")
        fixture.stdin.flush()
        out, err = proc.communicate(timeout=TIMEOUT)
        expect(proc.returncode == 0, f"tdctl exited {proc.returncode}: {err.decode(errors='replace')}")
        records = [json.loads(first)] + [json.loads(l) for l in out.decode().splitlines() if l.strip()]
        expect(fixture.stdout.readline().decode().startswith("ready"), "the fixture did not finish its spawns")
        fixture.stdin.write(b"g")
        fixture.stdin.flush()
        expect(fixture.wait(timeout=30) == 0, "the fixture failed after the detach")
    finally:
        if fixture.poll() is None:
            fixture.kill()
            fixture.wait()
    events = events_of(records)
    # The residents were made before the attach: no TD_CREATE for them.
    check_summary(records, events, "summary", site_counts(read_record(record)), skip_sites=("spawn_residents",))
    _, tracks, on_process = check_trace.check_perfetto(trace)
    check_trace.check_against_events(tracks, events, on_process)
    at_start = [l for l in tracks.values() if l.begin_args.get("alive_at_start")]
    expect(len(at_start) == 3, f"{len(at_start)} lifetimes alive at the attach (main and 2 residents)")
    at_end = [l for l in tracks.values() if l.end_args.get("alive_at_end")]
    expect(len(at_end) == 3, f"{len(at_end)} lifetimes alive at the detach (main and 2 residents)")


def case_agent(opts, tmp):
    trace, record = os.path.join(tmp, "t.trace"), os.path.join(tmp, "record")
    fixture = os.path.join(opts.fixtures, "sites")
    status, records = run_tdctl(["--agent", "--trace", trace, "--", fixture, "--record", record, "2", "2", "1", "2"],
                                opts.tdctl)
    expect(status == 0, f"tdctl exited {status}")
    events = events_of(records)
    _, tracks, on_process = check_trace.check_perfetto(trace)
    check_trace.check_against_events(tracks, events, on_process)
    sleeps = sum(l.nested["sleep"] for l in tracks.values())
    sleeps_seen = Counter(e["event"] for e in events)["TD_SLEEP"]
    expect(sleeps_seen > 0 and sleeps + sum(l.nested["sleep (timed out)"] for l in tracks.values()) == sleeps_seen,
           f"{sleeps} sleep slices for {sleeps_seen} TD_SLEEP")
    check_summary(records, events, "watch", site_counts(read_record(record)))


def case_locks(opts, tmp):
    """`locks` with --trace: each contention is a "lock wait" slice (with its
    "sleep" nested) on the waiter's track, as many per thread as the lock
    records count for that waiter."""
    trace, record = os.path.join(tmp, "t.trace"), os.path.join(tmp, "record")
    fixture = os.path.join(opts.fixtures, "..", "agent_e2e", "fixtures", "e2e_locks")
    status, records = run_tdctl(["--agent", "--trace", trace, "-e", "locks --for 60", "--", fixture, "--record",
                                 record, "2", "30", "30"], opts.tdctl)
    expect(status == 0, f"tdctl exited {status}")
    _, tracks, _ = check_trace.check_perfetto(trace)
    waits = Counter()
    for lock in (r for r in records if r["type"] == "lock"):
        for w in lock["waiters"]:
            waits[w["tid"]] += w["contentions"]
    expect(sum(waits.values()) == 8, f"{sum(waits.values())} contentions in the lock records, the fixture makes 8")
    slices, sleeps = Counter(), Counter()
    for l in tracks.values():
        slices[l.tid] += l.nested["lock wait"]
        sleeps[l.tid] += l.nested["sleep"]
    expect(+slices == +waits, f"lock wait slices per thread {dict(slices)} != contentions per waiter {dict(waits)}")
    # The waiters sleep only in their lock calls (the main thread's joins are sleeps too).
    expect(all(sleeps[t] == slices[t] for t in waits), f"sleep slices {dict(sleeps)} not one per lock wait {dict(slices)}")
    recorded = Counter(int(f[2]) for f in read_record(record) if f[0] == "wait")
    expect(recorded == waits, f"the fixture's waits per thread {dict(recorded)} != tdctl's {dict(waits)}")


NODE_SCRIPT = """
const { Worker } = require('worker_threads');
let left = 3;
function next() {
  if (left-- === 0) return;
  const w = new Worker('let s = 0; for (let i = 0; i < 1e5; i++) s += i;', { eval: true });
  w.on('exit', next);
}
next();
"""

JAVA_SOURCE = """
public class Spawn {
    public static void main(String[] args) throws Exception {
        Thread[] ts = new Thread[4];
        for (int i = 0; i < ts.length; i++) {
            ts[i] = new Thread(() -> { long s = 0; for (int k = 0; k < 100000; k++) s += k; }, "spawned-" + i);
            ts[i].start();
        }
        for (Thread t : ts) t.join();
    }
}
"""


def check_runtime_trace(opts, tmp, argv):
    trace = os.path.join(tmp, "t.trace")
    status, records = run_tdctl(["--trace", trace, "--"] + argv, opts.tdctl, timeout=120)
    expect(status == 0, f"tdctl exited {status}")
    events = events_of(records)
    expect(events, "no events printed")
    _, tracks, on_process = check_trace.check_perfetto(trace)
    check_trace.check_against_events(tracks, events, on_process)
    check_summary(records, events, "watch")
    return tracks


def case_node(opts, tmp):
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        print("skip: node is not installed")
        return SKIP
    tracks = check_runtime_trace(opts, tmp, [node, "-e", NODE_SCRIPT])
    expect(len(tracks) >= 4, f"{len(tracks)} tracks for node and three workers")


def case_java(opts, tmp):
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        print("skip: javac/java are not installed")
        return SKIP
    with open(os.path.join(tmp, "Spawn.java"), "w") as f:
        f.write(JAVA_SOURCE)
    subprocess.run([javac, "-d", tmp, os.path.join(tmp, "Spawn.java")], check=True, timeout=120)
    tracks = check_runtime_trace(opts, tmp, [java, "-Xshare:auto", "-cp", tmp, "Spawn"])
    names = {l.names[-1] for l in tracks.values()}
    expect({f"spawned-{i}" for i in range(4)} <= names, f"java thread names {sorted(names)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tdctl", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("case", choices=["launch", "json", "attach", "agent", "node", "java", "locks"])
    opts = parser.parse_args()
    if shutil.which("protoc") is None and opts.case != "json":
        print("FAIL: protoc is not installed (Debian: protobuf-compiler; scripts/setup-debian.sh)")
        return 1
    cases = {"launch": case_launch, "json": lambda o, t: case_launch(o, t, "json"), "attach": case_attach,
             "agent": case_agent, "node": case_node, "java": case_java, "locks": case_locks}
    with tempfile.TemporaryDirectory(prefix="tdctl-trace-") as tmp:
        try:
            result = cases[opts.case](opts, tmp)
        except CheckFailed as e:
            print(f"FAIL ({opts.case}): {e}")
            return 1
    print(f"ok: {opts.case}" if result is None else "")
    return result or 0


if __name__ == "__main__":
    sys.exit(main())
