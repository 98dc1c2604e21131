#!/usr/bin/env python3
"""Checks that a run whose updates are approximate (a compressed gradient
all-reduce) learns about as the exact run does:
compare-progress.py RUN EXACT TOL FALL

RUN and EXACT are JSON-lines metrics of the same steps. Exits 1 when a
step's loss differs from EXACT's by more than TOL (relative), or when RUN's
loss fell (first step's less last step's) by less than FALL times EXACT's:
a codec that sent nothing useful keeps the loss near where it started,
within TOL of a slowly learning run when TOL is loose."""
import json
import sys


def losses(path):
    with open(path) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r and "step" in r}


run, exact = losses(sys.argv[1]), losses(sys.argv[2])
tol, fall = float(sys.argv[3]), float(sys.argv[4])
if sorted(run) != sorted(exact) or not run:
    sys.exit(f"steps differ: {sorted(run)} vs {sorted(exact)}")
worst = 0.0
for step in sorted(run):
    rel = abs(run[step] - exact[step]) / exact[step]
    worst = max(worst, rel)
    if not rel <= tol:
        sys.exit(f"step {step}: {run[step]} vs the exact {exact[step]} (relative {rel:.3g} > {tol})")
first, last = min(run), max(run)
ratio = (run[first] - run[last]) / (exact[first] - exact[last])
if not ratio >= fall:
    sys.exit(f"the loss fell {run[first] - run[last]:.4g} from step {first} to {last}, "
             f"{ratio:.2f} of the exact run's {exact[first] - exact[last]:.4g} (< {fall})")
print(f"{len(run)} steps within {tol:g} of the exact run (max relative difference {worst:.2g}); "
      f"the loss fell {ratio:.2f} of the exact run's fall")
