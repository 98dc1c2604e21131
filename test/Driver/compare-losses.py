#!/usr/bin/env python3
"""Compares two JSON-lines loss logs step by step:
compare-losses.py A B TOL [FIELD] (FIELD: "loss" by default, "grad_norm", or
a dotted path such as "grad_norm_groups.experts" or "aux_loss.0", a number
indexing a list).

Exits 1, naming the first step that differs by more than TOL (relative) or
whose loss is not finite in either log (a NaN never matches), or when the
logs cover different steps; a malformed log is another error (exit 2)."""
import json
import math
import sys


def losses(path, field):
    try:
        with open(path) as f:
            rows = [json.loads(l) for l in f if l.strip()]
        out = {}
        for r in rows:
            value = r
            for key in field.split("."):
                if isinstance(value, list) and key.isdigit():
                    value = value[int(key)] if int(key) < len(value) else None
                else:
                    value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                out[r["step"]] = float(value)
        return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"{path}: not a metrics log: {e}", file=sys.stderr)
        sys.exit(2)


field = sys.argv[4] if len(sys.argv) > 4 else "loss"
a, b, tol = losses(sys.argv[1], field), losses(sys.argv[2], field), float(sys.argv[3])
if not a or not b:
    sys.exit(f"no {field} in {sys.argv[1] if not a else sys.argv[2]}")
if sorted(a) != sorted(b):
    sys.exit(f"steps differ: {sorted(a)} vs {sorted(b)}")
worst = 0.0
for step in sorted(a):
    if not (math.isfinite(a[step]) and math.isfinite(b[step])):
        sys.exit(f"step {step}: {a[step]} vs {b[step]} (not finite)")
    rel = abs(a[step] - b[step]) / max(abs(b[step]), 1e-12)
    worst = max(worst, rel)
    if not rel <= tol:
        sys.exit(f"step {step}: {a[step]} vs {b[step]} (relative {rel:.3g} > {tol})")
print(f"{len(a)} steps match, max relative difference {worst:.3g}" +
      ("" if field == "loss" else f" ({field})"))
