#!/usr/bin/env python3
"""Compares two JSON-lines loss logs step by step: compare-losses.py A B TOL.

Exits non-zero, naming the first step that differs by more than TOL
(relative), or when the logs cover different steps."""
import json
import sys


def losses(path):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if sorted(a) != sorted(b):
    sys.exit(f"steps differ: {sorted(a)} vs {sorted(b)}")
worst = 0.0
for step in sorted(a):
    rel = abs(a[step] - b[step]) / max(abs(b[step]), 1e-12)
    worst = max(worst, rel)
    if rel > tol:
        sys.exit(f"step {step}: {a[step]} vs {b[step]} (relative {rel:.3g} > {tol})")
print(f"{len(a)} steps match, max relative difference {worst:.3g}")
