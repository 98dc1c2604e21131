#!/usr/bin/env python3
"""Delayed gradients in PyTorch: is the cost of `--staleness 1` the model's?

The same model as `moec` compiles (bench/torch_moe.py), the shapes of
bench/local-steps.sh (the tiny example, sequences of 128, 8 per replica, 2
data replicas simulated in one process), STEPS steps of a text file with the
model's AdamW, clipping and warm-up + cosine schedule. Each step computes
both replicas' gradients and applies:
  sync   their mean;
  delay  last step's mean (the plain one-step delay);
  corr   last step's mean + (g0(t) - g0(t-1)), replica 0's local correction
         as runtime/lib/AsyncComm.cpp applies it (here one set of
         parameters, so replica drift is not modelled);
and with --dc LAM, DC-ASGD's delay compensation on last step's mean
(Zheng et al. 2017, the adaptive form): + LAM g*g/sqrt(ms) * (w(t) - w(t-1)),
ms a moving mean of g*g. Prints the validation loss (20 batches from the last
5% of the file) and, with --trace, the training loss every 20 steps.
  bench/torch_delay.py MODE SEED DATA [--steps 300] [--beta1 B] [--dc LAM] [--trace]
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_moe import Model  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["sync", "delay", "corr"])
ap.add_argument("seed", type=int)
ap.add_argument("data")
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--beta1", type=float)
ap.add_argument("--dc", type=float, default=0.0)
ap.add_argument("--trace", action="store_true")
ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "examples",
                                                 "models", "tiny.json"))
args = ap.parse_args()
torch.set_num_threads(1)
m = json.load(open(args.model))
m["seq_len"], m["batch_size"] = 128, 8  # per replica
torch.manual_seed(args.seed)
model = Model(m)
o = m["optimizer"]
beta1 = o["betas"][0] if args.beta1 is None else args.beta1
params = list(model.parameters())
opt = torch.optim.AdamW(params, lr=o["lr"], betas=(beta1, o["betas"][1]),
                        weight_decay=o["weight_decay"])
raw = bytearray(open(args.data, "rb").read())
corpus = torch.frombuffer(raw, dtype=torch.uint8).long()
n = len(corpus)
split = int(n * 0.95)
b, s = m["batch_size"], m["seq_len"]


def batch(lo, hi):
    starts = torch.randint(lo, hi - s - 1, (b,))
    w = torch.stack([corpus[i:i + s + 1] for i in starts.tolist()])
    return w[:, :-1], w[:, 1:]


def lr_at(t):
    if t < o["warmup_steps"]:
        return o["lr"] * (t + 1) / o["warmup_steps"]
    p = (t - o["warmup_steps"]) / max(1, args.steps - o["warmup_steps"])
    return o["min_lr"] + 0.5 * (o["lr"] - o["min_lr"]) * (1 + math.cos(math.pi * p))


def grads():
    for p in params:
        p.grad = None
    loss = model(*batch(0, split))
    loss.backward()
    return [p.grad.clone() for p in params], float(loss)


prev = prev_own = ms = None
wprev = [p.detach().clone() for p in params]
for t in range(args.steps):
    (g0, l0), (g1, l1) = grads(), grads()
    mean = [(a + c) / 2 for a, c in zip(g0, g1)]
    if args.mode == "sync" or prev is None:
        use = mean
    else:
        use = prev
        if args.dc:
            use = [u + args.dc * u * u / (q.sqrt() + 1e-8) * (p.detach() - w)
                   for u, q, p, w in zip(use, ms, params, wprev)]
        if args.mode == "corr":
            use = [u + (a - pa) for u, a, pa in zip(use, g0, prev_own)]
    ms = [0.95 * q + 0.05 * g * g for q, g in zip(ms, mean)] if ms else [g * g for g in mean]
    prev, prev_own = mean, g0
    wprev = [p.detach().clone() for p in params]
    for p, g in zip(params, use):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(params, o["grad_clip"])
    for group in opt.param_groups:
        group["lr"] = lr_at(t)
    opt.step()
    if args.trace and t % 20 == 0:
        print("step %d loss %.3f" % (t, (l0 + l1) / 2), flush=True)
torch.manual_seed(999)
with torch.no_grad():
    val = sum(float(model(*batch(split, n))) for _ in range(20)) / 20
print(json.dumps({"mode": args.mode, "seed": args.seed, "beta1": beta1, "dc": args.dc,
                  "val_loss": round(val, 4)}))
