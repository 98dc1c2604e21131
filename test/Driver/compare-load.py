#!/usr/bin/env python3
"""Compares the expert loads and drops of two JSON-lines logs step by step:
compare-load.py A B. Exits non-zero at the first step that differs, or
where a log's kept token-slots do not add up: each expert keeps at most the
slots routed to it, and the routed slots less the kept ones are the
dropped ones."""
import json
import sys


def loads(path):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    out = {}
    for r in rows:
        if "expert_tokens" not in r:
            continue
        routed, kept = r["expert_tokens"], r["expert_kept_tokens"]
        pairs = [(x, y) for a, b in zip(routed, kept) for x, y in zip(a, b)]
        if (len(routed) != len(kept) or any(len(a) != len(b) for a, b in zip(routed, kept))
                or any(not 0 <= y <= x for x, y in pairs)
                or sum(x - y for x, y in pairs) != r["dropped_tokens"]):
            sys.exit(f"{path}, step {r['step']}: kept {kept} against routed {routed} "
                     f"and {r['dropped_tokens']} dropped")
        out[r["step"]] = (routed, kept, r["dropped_tokens"])
    return out


a, b = loads(sys.argv[1]), loads(sys.argv[2])
if sorted(a) != sorted(b) or not a:
    sys.exit(f"steps differ: {sorted(a)} vs {sorted(b)}")
for step in sorted(a):
    if a[step] != b[step]:
        sys.exit(f"step {step}: {a[step]} vs {b[step]}")
print(f"{len(a)} steps: the same expert loads and drops")
