#!/usr/bin/env python3
"""Compares the expert loads and drops of two JSON-lines logs step by step:
compare-load.py A B. Exits non-zero at the first step that differs."""
import json
import sys


def loads(path):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return {r["step"]: (r["expert_tokens"], r["dropped_tokens"])
            for r in rows if "expert_tokens" in r}


a, b = loads(sys.argv[1]), loads(sys.argv[2])
if sorted(a) != sorted(b) or not a:
    sys.exit(f"steps differ: {sorted(a)} vs {sorted(b)}")
for step in sorted(a):
    if a[step] != b[step]:
        sys.exit(f"step {step}: {a[step]} vs {b[step]}")
print(f"{len(a)} steps: the same expert loads and drops")
