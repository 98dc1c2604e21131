#!/usr/bin/env python3
"""check-device-kernels.py DIR TARGET [MARKER] [--ptxas PTXAS]: every
generated kernel of moec's --emit=kernels output DIR (kernels.json, kernels/)
is a static library carrying device code for TARGET (cuda: PTX, opencl:
OpenCL C source; MARKER, when given, is text that code must contain, such as
`.target sm_80`), and the manifest names the target. With --ptxas (cuda),
the CUDA toolkit's PTX assembler must also assemble each kernel's PTX for
the GPU its `.target` names; the summary then adds how many kernels
synchronise their threads (bar.sync: the shared-memory tiles of the
contractions). Prints a one-line summary; exits 1 naming the first
kernel that fails."""
import json
import os
import re
import subprocess
import sys
import tempfile

args = sys.argv[1:]
ptxas = None
if "--ptxas" in args:
    i = args.index("--ptxas")
    ptxas = args[i + 1]
    del args[i:i + 2]
sys.argv[1:] = args
directory, target = sys.argv[1], sys.argv[2]
manifest = json.load(open(os.path.join(directory, "kernels.json")))
if manifest.get("target") != target:
    sys.exit("kernels.json names target %r, not %r" % (manifest.get("target"), target))
marker = {"cuda": b".target sm_", "opencl": b"__kernel"}[target]
if len(sys.argv) > 3:
    marker = sys.argv[3].encode()
count = assembled = tiled = 0
for name, kernel in manifest["kernels"].items():
    if "generator" not in kernel:
        continue  # a runtime routine
    path = os.path.join(directory, "kernels", name + ".a")
    if not os.path.isfile(path):
        sys.exit("%s: no %s" % (name, path))
    data = open(path, "rb").read()
    if marker not in data:
        sys.exit("%s (%s): no %s device code in %s" % (name, kernel["generator"], target, path))
    if ptxas:
        # The PTX module is a NUL-terminated string in the library.
        begin = data.find(b".version")
        end = data.find(b"\0", begin)
        arch = re.search(rb"\.target (sm_[0-9]+)", data[begin:end])
        if begin < 0 or not arch:
            sys.exit("%s: no PTX module with a .target in %s" % (name, path))
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "k.ptx")
            open(source, "wb").write(data[begin:end])
            run = subprocess.run([ptxas, "-arch=" + arch.group(1).decode(), source, "-o",
                                  os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit("%s (%s): ptxas rejects its PTX:\n%s" % (name, kernel["generator"],
                                                               run.stderr.strip()))
        tiled += b"bar.sync" in data[begin:end]
        assembled += 1
    count += 1
if count == 0:
    sys.exit("%s lists no generated kernel" % directory)
if ptxas:
    print("%d kernels with %s device code, %d assembled by ptxas, %d with shared-memory tiles"
          % (count, target, assembled, tiled))
else:
    print("%d kernels with %s device code" % (count, target))
