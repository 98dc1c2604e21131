#!/usr/bin/env python3
"""check-device-kernels.py DIR TARGET [MARKER]: every generated kernel of
moec's --emit=kernels output DIR (kernels.json, kernels/) is a static library
carrying device code for TARGET (cuda: PTX, opencl: OpenCL C source; MARKER,
when given, is text that code must contain, such as `.target sm_80`), and
the manifest names the target. Prints a one-line summary; exits 1 naming the
first kernel that fails."""
import json
import os
import sys

directory, target = sys.argv[1], sys.argv[2]
manifest = json.load(open(os.path.join(directory, "kernels.json")))
if manifest.get("target") != target:
    sys.exit("kernels.json names target %r, not %r" % (manifest.get("target"), target))
marker = {"cuda": b".target sm_", "opencl": b"__kernel"}[target]
if len(sys.argv) > 3:
    marker = sys.argv[3].encode()
count = 0
for name, kernel in manifest["kernels"].items():
    if "generator" not in kernel:
        continue  # a runtime routine
    path = os.path.join(directory, "kernels", name + ".a")
    if not os.path.isfile(path):
        sys.exit("%s: no %s" % (name, path))
    if marker not in open(path, "rb").read():
        sys.exit("%s (%s): no %s device code in %s" % (name, kernel["generator"], target, path))
    count += 1
if count == 0:
    sys.exit("%s lists no generated kernel" % directory)
print("%d kernels with %s device code" % (count, target))
