#!/usr/bin/env python3
"""SIGTERM (or SIGINT) stops a training run at a step boundary with a
checkpoint; resuming from it reproduces the uninterrupted run.

usage: signal-resume.py BINARY DATA STEPS WORKDIR SIGNAL

Starts BINARY with --checkpoint, waits for its first progress line, freezes
it (SIGSTOP), sends SIGNAL and lets it go on (SIGCONT), so the signal lands
early whatever the machine's load. Checks the exit status (128 + signal),
the message, that the checkpoint holds the step it names, and that resuming
to STEPS gives the uninterrupted losses bit for bit.
"""
import json
import os
import re
import signal
import subprocess
import sys

binary, data, steps, work, signame = sys.argv[1:6]
signo = getattr(signal, signame)
os.makedirs(work, exist_ok=True)
base = [binary, "--data", data, "--steps", steps, "--no-progress"]


def losses(path):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r and "step" in r]


ref = os.path.join(work, "reference.jsonl")
subprocess.run(base + ["--metrics", ref], check=True, capture_output=True)
want = dict(losses(ref))

ckpt, metrics = os.path.join(work, "ckpt"), os.path.join(work, "stopped.jsonl")
p = subprocess.Popen(base + ["--checkpoint", ckpt, "--metrics", metrics],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
lines = []
for line in p.stdout:
    lines.append(line)
    if line.startswith("step "):
        break
p.send_signal(signal.SIGSTOP)
p.send_signal(signo)
p.send_signal(signal.SIGCONT)
out, err = p.communicate()
out = "".join(lines) + out
if p.returncode != 128 + signo:
    sys.exit("exit %d, want %d\n%s%s" % (p.returncode, 128 + signo, out, err))
m = re.search(r"stopped by %s after step (\d+)" % signame, out)
if not m:
    sys.exit("no 'stopped by %s' line:\n%s" % (signame, out))
stopped = int(m.group(1))
with open(os.path.join(ckpt, "state.json")) as f:
    saved = json.load(f)["step"]
if saved != stopped or not 0 < stopped < int(steps):
    sys.exit("stopped after step %d, checkpoint at step %d" % (stopped, saved))
subprocess.run(base + ["--checkpoint", ckpt, "--resume", "--metrics", metrics], check=True,
               capture_output=True)
got = losses(metrics)
if dict(got) != want or len(got) != len(want):
    sys.exit("losses differ from the uninterrupted run")
print("%s stopped the run after step %d; resumed, %d steps match" % (signame, stopped, len(want)))
