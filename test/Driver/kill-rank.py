#!/usr/bin/env python3
"""Kills one rank of a running multi-process job and checks that the whole
job ends, non-zero, within a bound, naming the dead rank.

usage: kill-rank.py SECONDS BINARY_NAME -- LAUNCHER ARGS...

Starts the launcher, waits for the first progress line, SIGKILLs the newest
process whose command line contains BINARY_NAME (a rank, not the launcher),
and prints "ended with exit N in S s" and the launcher's output lines that
mention the kill.
"""
import os
import signal
import subprocess
import sys
import time

bound, name = float(sys.argv[1]), sys.argv[2]
cmd = sys.argv[sys.argv.index("--") + 1:]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
out = []
for line in p.stdout:
    out.append(line)
    if line.startswith("step "):
        break
ranks = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == p.pid:
        continue
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        continue
    if argv and argv[0].decode(errors="replace").endswith(name):
        ranks.append(int(pid))
if len(ranks) < 2:
    sys.exit("found %d rank processes of %s" % (len(ranks), name))
killed = max(ranks)
os.kill(killed, signal.SIGKILL)
start = time.monotonic()
try:
    rest, _ = p.communicate(timeout=bound)
except subprocess.TimeoutExpired:
    p.kill()
    sys.exit("the job still ran %.0f s after a rank was killed" % bound)
seconds = time.monotonic() - start
print("ended with exit %d in %.1f s" % (p.returncode, seconds))
for line in (rest or "").splitlines():
    if "signal 9" in line or "error:" in line:
        print(line.strip())
