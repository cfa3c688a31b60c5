#!/usr/bin/env python3
"""Checks the dtc.trace/1 files of a run against its program.

usage: check_traces.py TRACE_DIR PROGRAM_TEXT STEPS CALLS

PROGRAM_TEXT is `dtc compile --emit program` of the same bundle (it lists,
per group of ranks, each function's instruction count). CALLS says how many
times each function runs per step, e.g. "micro_step=2,apply=1" (a
pipeline stage's chunk functions once per micro-batch).

Checks, per rank: the file is Trace Event Format JSON (an object with a
traceEvents array; complete events with name, ph, pid, tid, ts, dur >= 0);
the pid is the rank; the events on each track never overlap; the steps
track has one event per step; every instruction of the rank's program
appears exactly once per call per step on the compute track, and every
communication start once per call per step on a communication track, with
the group's ranks; the instructions of pipeline passes (chunk functions) carry their
micro-batch.
Prints one summary line per rank; exits 1 on the first violation.
"""
import collections
import json
import os
import re
import sys


def fail(message):
    print("check_traces: " + message)
    sys.exit(1)


def program_functions(text):
    """rank -> {function: instruction count}."""
    ranks = {}
    current = []
    for line in text.splitlines():
        m = re.match(r"rank (\d+)(?:-(\d+))?:", line)
        if m:
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) else lo
            current = list(range(lo, hi + 1))
            for r in current:
                ranks[r] = {}
            continue
        m = re.match(r"\s+func (\S+): (\d+) instructions", line)
        if m:
            for r in current:
                ranks[r][m.group(1)] = int(m.group(2))
    return ranks


def main():
    trace_dir, program_path, steps, calls_spec = sys.argv[1:5]
    steps = int(steps)
    calls = dict((k, int(v)) for k, v in
                 (part.split("=") for part in calls_spec.split(",")))
    with open(program_path) as f:
        programs = program_functions(f.read())
    if not programs:
        fail("no rank programs in " + program_path)
    world = max(programs) + 1
    for rank in range(world):
        path = os.path.join(trace_dir, "rank-%d.trace.json" % rank)
        if os.path.exists(path + ".partial"):
            fail(path + ".partial left behind")
        with open(path) as f:
            trace = json.load(f)
        if not isinstance(trace, dict) or not isinstance(
                trace.get("traceEvents"), list):
            fail(path + ": no traceEvents array")
        other = trace.get("otherData", {})
        if other.get("schema") != "dtc.trace/1" or other.get("rank") != rank:
            fail(path + ": otherData %r" % other)
        if other.get("status") != "complete":
            fail(path + ": status %r" % other.get("status"))
        if other.get("world_size") != world:
            fail(path + ": world_size %r, program has %d ranks" %
                 (other.get("world_size"), world))
        tracks = collections.defaultdict(list)
        names = {}
        for e in trace["traceEvents"]:
            for key in ("name", "ph", "pid", "tid"):
                if key not in e:
                    fail("%s: event without %s: %r" % (path, key, e))
            if e["pid"] != rank:
                fail("%s: event of pid %r" % (path, e["pid"]))
            if e["ph"] == "M":
                if e["name"] == "thread_name":
                    names[e["tid"]] = e["args"]["name"]
                continue
            if e["ph"] != "X":
                fail("%s: unexpected phase %r" % (path, e["ph"]))
            if not (isinstance(e.get("ts"), (int, float)) and
                    isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
                fail("%s: bad ts/dur in %r" % (path, e))
            tracks[e["tid"]].append(e)
        for tid, events in tracks.items():
            if tid not in names:
                fail("%s: track %d has no thread_name" % (path, tid))
            events.sort(key=lambda e: e["ts"])
            for a, b in zip(events, events[1:]):
                # Timestamps are printed to 1 ns.
                if b["ts"] < a["ts"] + a["dur"] - 0.002:
                    fail("%s: overlapping events on track %s: %r and %r" %
                         (path, names[tid], a, b))
        if names.get(0) != "compute" or names.get(1) != "steps":
            fail("%s: track names %r" % (path, names))
        step_events = [e["args"]["step"] for e in tracks[1]]
        if step_events != list(range(1, steps + 1)):
            fail("%s: step events %r" % (path, step_events))

        functions = programs[rank]
        seen = collections.Counter()
        starts = collections.Counter()
        for e in tracks[0]:
            a = e["args"]
            fn, index = a["function"], a["index"]
            if fn not in functions or not 0 <= index < functions[fn]:
                fail("%s: unknown instruction %s #%s" % (path, fn, index))
            if fn.startswith("chunk") and "micro_batch" not in a:
                fail("%s: pipeline pass instruction without micro_batch: %r" %
                     (path, e))
            seen[(a["step"], fn, index)] += 1
            if seen[(a["step"], fn, index)] > calls.get(fn, 0):
                fail("%s: step %d %s instruction %d appears more than %d "
                     "times" % (path, a["step"], fn, index, calls.get(fn, 0)))
            if e["name"].endswith("_start"):
                starts[(a["step"], fn, a["call"], index)] += 1
        for step in range(1, steps + 1):
            for fn, count in functions.items():
                for index in range(count):
                    n = seen[(step, fn, index)]
                    if n != calls.get(fn, 0):
                        fail("%s: step %d %s instruction %d appears %d "
                             "times, not %d" % (path, step, fn, index, n,
                                                calls.get(fn, 0)))
        expected_events = sum(calls.get(fn, 0) * count
                              for fn, count in functions.items()) * steps
        if len(tracks[0]) != expected_events:
            fail("%s: %d compute events, expected %d" %
                 (path, len(tracks[0]), expected_events))

        comm = collections.Counter()
        for tid, events in tracks.items():
            if tid < 2:
                continue
            if not names[tid].startswith("communication"):
                fail("%s: track %d is %r" % (path, tid, names[tid]))
            for e in events:
                a = e["args"]
                if rank not in a["ranks"] or len(a["ranks"]) < 2:
                    fail("%s: communication without its group: %r" % (path, e))
                comm[(a["step"], a["function"], a["call"], a["index"])] += 1
        if comm != starts:
            fail("%s: communication events do not match the starts "
                 "(%d vs %d)" % (path, sum(comm.values()),
                                 sum(starts.values())))
        print("rank %d: %d steps, %d compute events, %d communication "
              "events on %d track(s)" %
              (rank, steps, len(tracks[0]), sum(comm.values()),
               len([t for t in tracks if t >= 2])))


if __name__ == "__main__":
    main()
