"""Checks which OpenBLAS kernels a training binary runs (OPENBLAS_VERBOSE=2
prints "Core: NAME" each time OpenBLAS loads):
- OPENBLAS_CORETYPE unset: the core bench/blas_core.py's rule selects
  (the binary executed itself again: two loads) where OpenBLAS's own
  choice is weaker than the CPU, else OpenBLAS's own choice, loaded once;
- OPENBLAS_CORETYPE set by the user (Prescott): that core, loaded once.
    check-blas-core.py BINARY DATA REPO_ROOT
"""
import os
import platform
import re
import subprocess
import sys

binary, data, root = sys.argv[1:4]
if platform.machine() != "x86_64":
    print("blas core: not checked (OpenBLAS's x86 cores only)")
    sys.exit(0)
sys.path.insert(0, os.path.join(root, "bench"))
from blas_core import selected_core  # noqa: E402


def cores(env_core):
    env = dict(os.environ, OPENBLAS_VERBOSE="2")
    env.pop("OPENBLAS_CORETYPE", None)
    if env_core:
        env["OPENBLAS_CORETYPE"] = env_core
    run = subprocess.run([binary, "--data", data, "--steps", "1", "--no-progress"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        sys.exit("the binary failed:\n" + run.stdout)
    return re.findall(r"^Core: (\S+)", run.stdout, re.M)


os.environ.pop("OPENBLAS_CORETYPE", None)  # the rule for a user who chose none
want = selected_core()
got = cores(None)
if want:
    if got[-1:] != [want] or len(got) != 2:
        sys.exit("expected OpenBLAS reloaded with %s, got cores %s" % (want, got))
elif len(got) != 1:
    sys.exit("expected OpenBLAS's own core, loaded once; got %s" % got)
# Prescott (SSE3) runs on every x86-64 CPU; OpenBLAS does not check.
forced = cores("Prescott")
if forced != ["Prescott"]:
    sys.exit("a user's OPENBLAS_CORETYPE=Prescott gave cores %s" % forced)
print("blas core: %s (%s)" % (got[-1], "selected" if want else "OpenBLAS's own"))
