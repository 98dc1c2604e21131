#!/usr/bin/env python3
"""Checks DeepSeek-V3's load rule end to end: check-load-rule.py KEPT METRICS
RATE. KEPT holds a checkpoint after every step (--checkpoint-every 1
--keep-checkpoints K), METRICS the run's JSON lines. For each step s whose
checkpoint and predecessor exist (the predecessor of step 1 is the initial
bias, zero), every MoE layer's selection bias must have moved by exactly
RATE * sign(mean - load[e]), where load is the step's expert_tokens (the
whole batch's token-slots per expert, every rank's): down for an overloaded
expert, up for an underloaded one, not at all at the mean. Exits non-zero at
the first difference."""
import glob
import json
import os
import re
import sys

import tensorfile


def biases(path):
    """The router_bias tensors of a safetensors file, by layer index."""
    found = tensorfile.read(path, lambda n: re.fullmatch(r"l(\d+)\.router_bias", n) is not None)
    return {int(re.fullmatch(r"l(\d+)\.router_bias", n).group(1)): v for n, v in found.items()}


kept, metrics, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
loads = {}
with open(metrics) as f:
    for line in f:
        row = json.loads(line)
        if "expert_tokens" in row:
            loads[row["step"]] = row["expert_tokens"]
saved = {int(re.search(r"step-(\d+)", p).group(1)): biases(p)
         for p in glob.glob(os.path.join(kept, "step-*.safetensors"))}
if not saved:
    sys.exit(f"no kept checkpoints in {kept}")
layers = sorted(next(iter(saved.values())))
if not layers:
    sys.exit("the checkpoints hold no router_bias")
checked = moved = 0
for step in sorted(saved):
    before = saved.get(step - 1) if step > 1 else {
        l: (0.0,) * len(saved[step][l]) for l in layers}
    if before is None:
        continue
    if len(loads[step]) != len(layers):
        sys.exit(f"{len(loads[step])} MoE layers but {len(layers)} biases: "
                 "this check needs a bias on every MoE layer")
    for i, layer in enumerate(layers):
        load = loads[step][i]
        mean = sum(load) / len(load)
        for e, (b0, b1) in enumerate(zip(before[layer], saved[step][layer])):
            want = b0 + (rate if load[e] < mean else -rate if load[e] > mean else 0.0)
            if abs(b1 - want) > 1e-6 * max(1.0, abs(want)):
                sys.exit(f"step {step}, layer {layer}, expert {e}: bias {b0} -> {b1}, "
                         f"want {want} (load {load[e]}, mean {mean})")
            moved += b1 != b0
            checked += 1
if moved == 0:
    sys.exit("no bias moved")
print(f"load rule holds: {checked} expert biases over {len(saved)} steps, {moved} moved")
