#!/usr/bin/env python3
"""Kills a training binary at random moments and resumes it until it
finishes; every step's loss, from every attempt, must equal the
uninterrupted run's bit for bit.

usage: interrupt-resume.py BINARY DATA STEPS WORKDIR KILLS [SEED]

BINARY is run with --checkpoint-every 1, so most kills land in or near a
save. After each kill the checkpoint must load (the next attempt resumes
from it or, before the first save completed, starts afresh). At the end no
temporary file of a killed save is left. Prints "K kills, R resumes, S steps
match".
"""
import glob
import json
import os
import random
import subprocess
import sys
import time

binary, data, steps, work, kills = sys.argv[1:6]
rng = random.Random(int(sys.argv[6]) if len(sys.argv) > 6 else 1)
steps, kills = int(steps), int(kills)
os.makedirs(work, exist_ok=True)
base = [binary, "--data", data, "--steps", str(steps), "--no-progress"]


def losses(path, killed=False):
    """(step, loss) pairs; a killed run's last line may be cut short."""
    out = []
    with open(path) as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if killed and i == len(lines) - 1:
                break
            raise
        if "loss" in row and "step" in row:
            out.append((row["step"], row["loss"]))
    return out


ref = os.path.join(work, "reference.jsonl")
subprocess.run(base + ["--metrics", ref], check=True, capture_output=True)
want = dict(losses(ref))
# Kill moments span a run that saves every step.
start = time.monotonic()
subprocess.run(base + ["--checkpoint", os.path.join(work, "timing"), "--checkpoint-every", "1"],
               check=True, capture_output=True)
duration = time.monotonic() - start

ckpt = os.path.join(work, "ckpt")
got = []
done = killed = resumed = 0
for attempt in range(kills + 1):
    metrics = os.path.join(work, "attempt-%d.jsonl" % attempt)
    args = base + ["--checkpoint", ckpt, "--checkpoint-every", "1", "--metrics", metrics]
    if os.path.exists(os.path.join(ckpt, "tensors.safetensors")):
        args.append("--resume")
        resumed += 1
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if attempt < kills:
        try:
            p.wait(timeout=rng.uniform(0, duration * 0.4))
        except subprocess.TimeoutExpired:
            p.kill()
            killed += 1
    out, err = p.communicate()
    if os.path.exists(metrics):
        got += losses(metrics, killed=p.returncode == -9)
    if p.returncode == 0:
        done = 1
        break
    if p.returncode != -9:
        sys.exit("attempt %d exited %d: %s" % (attempt, p.returncode, err.decode()))
if not done:
    sys.exit("the last attempt did not finish")
for step, loss in got:
    if want.get(step) != loss:
        sys.exit("step %d: loss %r after resuming, %r uninterrupted" % (step, loss, want.get(step)))
if sorted(set(s for s, _ in got)) != sorted(want):
    sys.exit("steps %s, want %s" % (sorted(set(s for s, _ in got)), sorted(want)))
left = glob.glob(os.path.join(ckpt, "*.tmp.*"))
if left:
    sys.exit("temporary files left: %s" % left)
print("%d kills, %d resumes, %d steps match" % (killed, resumed, len(want)))
