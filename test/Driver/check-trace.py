#!/usr/bin/env python3
"""Checks a --trace file: check-trace.py TRACE RANKS STEPS [SLOW_RANK SLOWDOWN]

A Chrome trace (JSON object with "traceEvents"): every rank 0..RANKS-1 is a
process named "rank R" with lanes compute (tid 0), communication (1), steps
(2) and background (3: all-reduces started by moe-schedule, all-to-alls by
moe-pipeline-experts); complete ("X") events with ts >= 0 and dur >= 0; STEPS step
events per rank; on each rank the compute and communication events do not
overlap (one rank does one thing at a time). With SLOW_RANK: that rank's
compute is followed by an "emulated slowdown" of at least SLOWDOWN times it
(the wait never ends early), and no other rank has one. Prints how many
background all-reduces (and all-to-alls: moe-pipeline-experts) overlap a
compute event of their rank."""
import json
import sys

path, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
slow = int(sys.argv[4]) if len(sys.argv) > 4 else None
factor = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
events = json.load(open(path))["traceEvents"]
names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M"}
for r in range(ranks):
    assert names.get((r, None)) == f"rank {r}", names
    assert [names.get((r, t)) for t in range(4)] == ["compute", "communication", "steps",
                                                     "background"], names
spans = [e for e in events if e["ph"] == "X"]
assert all(e["ts"] >= 0 and e["dur"] >= 0 and e["pid"] in range(ranks) for e in spans)
waits = 0
background = overlapping = 0
exchanges = exchanging = 0
for r in range(ranks):
    mine = [e for e in spans if e["pid"] == r]
    assert sum(e["tid"] == 2 for e in mine) == steps, (r, sum(e["tid"] == 2 for e in mine))
    busy = sorted((e for e in mine if e["tid"] in (0, 1)), key=lambda e: e["ts"])
    for a, b in zip(busy, busy[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, ("overlap", r, a, b)
    for a, b in zip(busy, busy[1:]):
        if b["name"] == "emulated slowdown":
            assert r == slow, ("a slowdown on rank", r)
            assert a["name"] == "compute" and b["dur"] >= factor * a["dur"], (a, b)
            waits += 1
    if r == slow:
        assert any(e["name"] == "emulated slowdown" for e in mine), "no slowdown recorded"
    compute = [e for e in mine if e["tid"] == 0 and e["name"] == "compute"]
    for b in (e for e in mine if e["tid"] == 3):
        over = any(c["ts"] < b["ts"] + b["dur"] and b["ts"] < c["ts"] + c["dur"]
                   for c in compute)
        if b["name"].startswith("all_to_all"):
            exchanges += 1
            exchanging += over
        else:
            background += 1
            overlapping += over
print(f"trace of {ranks} ranks, {steps} steps, {len(spans)} events" +
      (f", {waits} emulated slowdowns on rank {slow}" if slow is not None else "") +
      (f", {background} background all-reduces, {overlapping} overlapping compute"
       if background else "") +
      (f", {exchanges} background all-to-alls, {exchanging} overlapping compute"
       if exchanges else ""))
