#!/usr/bin/env python3
"""check-cuda-run.py BINARY DATA HOST_METRICS: runs a moec --target cuda
binary for 6 steps. Without an NVIDIA GPU it must fail with one clear line
(no crash, no flood of driver errors); with one, its losses must match the
host binary's (HOST_METRICS, 6 steps) within 1e-3. Prints which held."""
import json
import subprocess
import sys

binary, data, host = sys.argv[1:4]
metrics = binary + ".jsonl"
run = subprocess.run([binary, "--data", data, "--steps", "6", "--no-progress", "--metrics",
                      metrics], capture_output=True, text=True, timeout=600)
if run.returncode != 0:
    errors = [l for l in run.stderr.splitlines() if l.startswith("kernel error")]
    if run.returncode < 0 or len(errors) != 1 or "no cuda device answers" not in errors[0]:
        sys.exit("unclear failure (exit %d):\n%s" % (run.returncode, run.stderr))
    print("no GPU: one clear error")
    sys.exit(0)
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"loss"' in l and '"step"' in l]
a, b = losses(metrics), losses(host)
if not a or len(a) != len(b):
    sys.exit("GPU run logged %d steps, the host %d" % (len(a), len(b)))
worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
if worst > 1e-3:
    sys.exit("GPU losses differ from the host's: %s vs %s" % (a, b))
print("GPU: losses match the host's")
