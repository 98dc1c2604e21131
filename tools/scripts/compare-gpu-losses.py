#!/usr/bin/env python3
"""Compares training losses logged by moec binaries on a GPU with the ones
their host twins logged (tools/scripts/gpu-check.sh), and fails on any
difference beyond the tolerance.

usage: compare-gpu-losses.py [--tol T] REF GOT

REF and GOT are two metrics logs (JSON lines, docs/Metrics.md), or two
directories: then every REF/NAME.jsonl is compared with GOT/NAME.jsonl. A
log's losses are those of its training-step lines (the lines with `step`,
`loss` and `tokens_per_s`; evaluation lines have no `tokens_per_s`).

A comparison fails when GOT's log is missing or unreadable, when REF's has
no training step, when the two logs cover different steps (a run that
stopped early, or logged a step twice differently), or when a step's loss
differs from REF's by more than T relative (a NaN never matches). One line
per comparison; the exit status is the number of failed comparisons (at
most 100), so 0 when all match.

Tolerance. DEFAULT_TOL (1e-4 relative) is what two f32 runs of the same
step program may differ by when only the order of floating-point sums
differs (the CUDA kernels sum in other orders than the host's): the one GPU
run so far (docs/Targets.md, "Measured on a GPU") measured at most 7.1e-7
over 20-30 steps of every configuration, so 1e-4 leaves two orders of
magnitude for longer runs and other GPUs, and is still far below a wrong
kernel (a wrong gradient or a dropped expert moves the loss by 1e-3 or more
within a few steps). `--tol 0` asks for identical losses (schedules that
sum in the same order).
"""

import argparse
import json
import math
import os
import sys

DEFAULT_TOL = 1e-4


def step_losses(path):
    """{step: loss} of a log's training steps; raises OSError/ValueError."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("line %d is not a JSON object" % n)
            if "loss" in row and "step" in row and "tokens_per_s" in row:
                # A NaN loss is logged as null (JSON has no NaN).
                step = row["step"]
                loss = float("nan") if row["loss"] is None else float(row["loss"])
                if step in out and not (out[step] == loss):
                    raise ValueError("step %s logged twice with different losses" % step)
                out[step] = loss
    return out


def compare(name, ref_path, got_path, tol):
    """Prints one line; returns True when GOT matches REF within tol."""
    try:
        ref = step_losses(ref_path)
    except (OSError, ValueError, TypeError) as e:
        print("%-12s FAIL reference unreadable: %s" % (name, e))
        return False
    try:
        got = step_losses(got_path)
    except (OSError, ValueError, TypeError) as e:
        print("%-12s FAIL no run to compare: %s" % (name, e))
        return False
    if not ref:
        print("%-12s FAIL the reference %s logs no training step" % (name, ref_path))
        return False
    if got.keys() != ref.keys():
        missing = sorted(set(ref) - set(got))
        extra = sorted(set(got) - set(ref))
        print("%-12s FAIL steps differ: %d logged, the reference %d%s%s"
              % (name, len(got), len(ref),
                 "; missing %s" % _steps(missing) if missing else "",
                 "; not in the reference %s" % _steps(extra) if extra else ""))
        return False
    worst, worst_step = 0.0, None
    for step in sorted(ref):
        a, b = got[step], ref[step]
        rel = abs(a - b) / max(abs(b), 1e-12) if math.isfinite(a) and math.isfinite(b) \
            else float("nan")
        # The largest difference; a NaN (no match) stays the worst.
        if worst_step is None or (not math.isnan(worst) and not rel <= worst):
            worst, worst_step = rel, step
    ok = worst <= tol
    last = max(ref)
    print("%-12s %s steps %3d  worst rel loss diff %.2e (step %s, tolerance %g)  last %.4f"
          % (name, "ok  " if ok else "FAIL", len(ref), worst, worst_step, tol, got[last]))
    return ok


def _steps(steps):
    return ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ref")
    ap.add_argument("got")
    ap.add_argument("--tol", type=float, default=DEFAULT_TOL,
                    help="relative tolerance per step (default %(default)g; 0: identical)")
    args = ap.parse_args()
    if not args.tol >= 0:
        ap.error("--tol must be >= 0")
    if os.path.isdir(args.ref):
        names = sorted(f[:-len(".jsonl")] for f in os.listdir(args.ref) if f.endswith(".jsonl"))
        if not names:
            print("FAIL %s holds no .jsonl reference" % args.ref)
            return 1
        pairs = [(n, os.path.join(args.ref, n + ".jsonl"), os.path.join(args.got, n + ".jsonl"))
                 for n in names]
    else:
        name = os.path.basename(args.got)
        pairs = [(name[:-len(".jsonl")] if name.endswith(".jsonl") else name, args.ref, args.got)]
    failed = sum(not compare(name, ref, got, args.tol) for name, ref, got in pairs)
    print("%d of %d loss comparisons failed" % (failed, len(pairs)))
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
