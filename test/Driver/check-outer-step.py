#!/usr/bin/env python3
"""Checks one outer step of --local-steps on one replica:
check-outer-step.py START INNER OUTER LR MU

START, INNER and OUTER are checkpoint files (tensors.safetensors): the
parameters where the window started (the end of --sync-steps), where plain
training reached the window's end (one replica's inner steps are plain
steps), and what the run with the outer step saved. With the outer momentum
starting at zero, the outer step is Nesterov's first:
OUTER = START - LR * (1 + MU) * (START - INNER), for every parameter
(AdamW moments and outer momenta excluded), within float rounding. Exits
non-zero naming the first parameter that differs."""
import sys

import tensorfile


def tensors(path):
    return tensorfile.read(path, lambda n: not n.endswith((".adam_m", ".adam_v", ".outer_v")))


start, inner, outer = (tensors(p) for p in sys.argv[1:4])
lr, mu = float(sys.argv[4]), float(sys.argv[5])
assert start.keys() == inner.keys() == outer.keys() and start, "different parameters"
worst = 0.0
for name in sorted(start):
    for s, i, o in zip(start[name], inner[name], outer[name]):
        want = s - lr * (1 + mu) * (s - i)
        err = abs(o - want) / max(abs(want), 1e-3)
        worst = max(worst, err)
        if err > 1e-4:
            sys.exit(f"{name}: {o} where the outer step gives {want} (start {s}, inner {i})")
print(f"outer step exact over {len(start)} parameters, max relative difference {worst:.2g}")
