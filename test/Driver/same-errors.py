"""Runs moec and moe-translate on every bad input in a folder and checks that
moec reports each exactly as moe-translate does: a non-zero exit (not a
signal), the same first `error:` line, and no crash report.

usage: same-errors.py MOEC MOE_TRANSLATE KIND FOLDER [EXTRA_ARGS...]
KIND: model (--import-model / moec FILE), hf (--import-hf-config / moec
--hf FILE) or cluster (--cluster FILE with the tiny model).
"""
import glob
import os
import subprocess
import sys

moec, translate, kind, folder = sys.argv[1:5]
tiny = sys.argv[5]
out = os.path.join(folder, "moec-out")


def first_error(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if p.returncode <= 0:
        return p.returncode, None, p.stderr
    lines = [l for l in p.stderr.splitlines() if "error:" in l]
    return p.returncode, lines[0] if lines else None, p.stderr


failures = 0
files = sorted(glob.glob(os.path.join(folder, "*.json")))
for f in files:
    if kind == "model":
        want = [translate, "--import-model", f]
        got = [moec, f, "-o", out, "--emit=mlir"]
    elif kind == "hf":
        want = [translate, "--import-hf-config", f]
        got = [moec, "--hf", f, "-o", out, "--emit=mlir"]
    else:
        want = [translate, "--cluster", f, "--import-model", tiny]
        got = [moec, tiny, "--cluster", f, "-o", out, "--emit=mlir"]
    rc_want, err_want, _ = first_error(want)
    rc_got, err_got, stderr = first_error(got)
    bad = []
    if rc_want <= 0:
        bad.append("moe-translate accepted it (exit %d)" % rc_want)
    if rc_got <= 0:
        bad.append("moec exit %d (a signal if negative)" % rc_got)
    if "Stack dump" in stderr or "PLEASE submit" in stderr:
        bad.append("moec printed a crash report")
    if err_got != err_want:
        bad.append("moec said %r, moe-translate %r" % (err_got, err_want))
    if bad:
        failures += 1
        print("%s: %s" % (os.path.basename(f), "; ".join(bad)))
print("%d inputs, %d differ" % (len(files), failures))
sys.exit(1 if failures or not files else 0)
