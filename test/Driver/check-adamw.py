#!/usr/bin/env python3
"""Checks the AdamW updates a training binary made against an independent
AdamW, from kept checkpoints of consecutive steps:
check-adamw.py MODEL.json METRICS.jsonl DIR STEP...

DIR holds DIR/step-N.safetensors for N in STEP and N + 1 (--checkpoint DIR
--checkpoint-every 1 --keep-checkpoints K): every parameter with its AdamW
moments (NAME.adam_m, NAME.adam_v). MODEL.json's optimizer gives lr (with a
constant schedule and no warm-up: every step's), betas (b1, b2), eps,
weight_decay (decoupled, on matrices: parameters of rank >= 2; norm gains
and vectors are not decayed) and grad_clip. METRICS.jsonl gives each step's
grad_norm (before clipping). From step N to N + 1 (update number
t = N + 1), with g the gradient and c = min(1, grad_clip / (grad_norm + 1e-6))
the clip factor:
    m' = b1 m + (1 - b1) c g                 (m' and m are known: this gives c g)
    v' = b2 v + (1 - b2) (c g)^2             checked
    w' = w - lr (m'/(1 - b1^t) / (sqrt(v'/(1 - b2^t)) + eps) + wd w)   checked
    |c g| over every parameter = c grad_norm checked (the clip factor)
g itself is recovered only as c g: the first two checks hold whatever the
factor, the last one checks it. Errors are relative to each quantity's own
scale: v' to its larger term (m' recovers c g with f32 rounding amplified
by 1 / (1 - b1)), w' to the step size lr beyond one unit in w's last place
(norm gains near 1 round to more than the update's error), the gradient's
norm to c grad_norm. The worst of each is printed with its tolerance."""
import json
import math
import os
import sys

import numpy as np

import tensorfile

model = json.load(open(sys.argv[1]))
opt = model["optimizer"]
assert opt.get("schedule") == "constant" and opt.get("warmup_steps") == 0, \
    "give a constant schedule without warm-up (every step's lr is the peak)"
f32 = lambda x: float(np.float32(x))  # the binary's attributes are f32
lr, (b1, b2) = f32(opt["lr"]), (f32(b) for b in opt["betas"])
eps, wd, clip_at = f32(opt["eps"]), f32(opt["weight_decay"]), f32(opt["grad_clip"])
norms = {r["step"]: r for r in map(json.loads, open(sys.argv[2])) if "grad_norm" in r}


def load(step):
    path = os.path.join(sys.argv[3], f"step-{step:012d}.safetensors")
    shapes = tensorfile.shapes(path)
    return {n: np.array(v, dtype=np.float64) for n, v in tensorfile.read(path).items()}, shapes


worst = {"v": 0.0, "w": 0.0, "clip": 0.0}
# About 5x what the micro model measured (v 3.3e-7, w 6e-7, clip 3.3e-8):
# float rounding, where any of the mutations tested costs 1e-2 or more.
tol = {"v": 1.5e-6, "w": 3e-6, "clip": 2e-7}
clipped = 0
for n in map(int, sys.argv[4:]):
    (before, shapes), (after, _) = load(n), load(n + 1)
    row = norms[n + 1]
    assert row["lr"] == lr, f"step {n + 1}: lr {row['lr']}, the constant schedule's {lr}"
    t = n + 1
    c = min(1.0, clip_at / (row["grad_norm"] + 1e-6)) if clip_at > 0 else 1.0
    clipped += c < 1
    squares = 0.0
    for name in sorted(k for k in before if k + ".adam_m" in before):
        w, m, v = before[name], before[name + ".adam_m"], before[name + ".adam_v"]
        w1, m1, v1 = after[name], after[name + ".adam_m"], after[name + ".adam_v"]
        g = (m1 - b1 * m) / (1 - b1)  # the clipped gradient
        squares += float(np.sum(g * g))
        # v': relative to the larger of its terms (m' rounding enters g^2).
        scale = np.maximum(np.maximum(v1, b2 * v), 1e-30)
        err = float(np.max(np.abs(v1 - (b2 * v + (1 - b2) * g * g)) / scale))
        if err > tol["v"]:
            sys.exit(f"step {t}: {name}.adam_v differs from b2 v + (1 - b2) g^2 by {err:.3g} "
                     f"(relative; tolerance {tol['v']})")
        worst["v"] = max(worst["v"], err)
        decay = wd if len(shapes[name]) >= 2 else 0.0
        mh, vh = m1 / (1 - b1**t), v1 / (1 - b2**t)
        want = w - lr * (mh / (np.sqrt(vh) + eps) + decay * w)
        # w' is f32: past one unit in its last place, relative to the step size.
        off = np.maximum(np.abs(w1 - want) - np.spacing(np.abs(w1).astype(np.float32)), 0)
        err = float(np.max(off) / lr)
        if err > tol["w"]:
            j = int(np.argmax(off))
            sys.exit(f"step {t}: {name}[{j}] is {w1[j]!r}, AdamW gives {want[j]!r} (from "
                     f"{w[j]!r}; error {err:.3g} x lr, tolerance {tol['w']})")
        worst["w"] = max(worst["w"], err)
    err = abs(math.sqrt(squares) - c * row["grad_norm"]) / (c * row["grad_norm"])
    if err > tol["clip"]:
        sys.exit(f"step {t}: the update's gradient has norm {math.sqrt(squares):.7g}; clipping "
                 f"{row['grad_norm']:.7g} to {clip_at} gives {c * row['grad_norm']:.7g}")
    worst["clip"] = max(worst["clip"], err)
print(f"AdamW exact over {len(sys.argv) - 4} steps ({clipped} clipped): "
      + ", ".join(f"{k} {worst[k]:.2g} (tolerance {tol[k]:g})" for k in worst))
