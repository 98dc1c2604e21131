#!/usr/bin/env python3
"""Checks one outer step of --local-steps.

check-outer-step.py START INNER OUTER LR MU
  One replica. START, INNER and OUTER are checkpoint files
  (tensors.safetensors): the parameters where the window started (the end
  of --sync-steps), where plain training reached the window's end (one
  replica's inner steps are plain steps), and what the run with the outer
  step saved. With the outer momentum starting at zero, the outer step is
  Nesterov's first: OUTER = START - LR * (1 + MU) * (START - INNER), for
  every parameter (AdamW moments and outer momenta excluded), within float
  rounding. On one replica the mean of the deltas is the delta itself, so
  this form cannot tell a mean from a sum: the form below can.

check-outer-step.py --replicas START OUTER LR MU REPLICA...
  Two or more replicas. START and OUTER are kept checkpoints
  (DIR/step-N.safetensors) of two consecutive outer steps, REPLICA... the
  files --save-replicas wrote for OUTER's step (each replica's parameters
  before the outer step). With Delta = mean over the replicas of
  (START - REPLICA) and v START's outer momentum (NAME.outer_v):
      v'    = MU v + Delta                 (OUTER's NAME.outer_v)
      OUTER = START - LR (Delta + MU v')
  for every parameter, within float rounding (relative 1e-5, floored at
  1e-3; measured 1.7e-6 on the micro model); the replicas must differ
  (else a sum would be a mean times a constant, not a wrong average).

Exits non-zero naming the first value that differs."""
import sys

import tensorfile

def close(got, want, what, tol=1e-4):
    """The relative difference (floored at 1e-3), or an exit naming `what`."""
    err = abs(got - want) / max(abs(want), 1e-3)
    if err > tol:
        sys.exit(f"{what}: {got} where the outer step gives {want}")
    return err


def params(path):
    return tensorfile.read(path, lambda n: not n.endswith((".adam_m", ".adam_v", ".outer_v")))


def one_replica(argv):
    start, inner, outer = (params(p) for p in argv[:3])
    lr, mu = float(argv[3]), float(argv[4])
    assert start.keys() == inner.keys() == outer.keys() and start, "different parameters"
    worst = 0.0
    for name in sorted(start):
        for s, i, o in zip(start[name], inner[name], outer[name]):
            worst = max(worst, close(o, s - lr * (1 + mu) * (s - i),
                                     f"{name} (start {s}, inner {i})"))
    print(f"outer step exact over {len(start)} parameters, max relative difference {worst:.2g}")


def replicas(argv):
    start_all, outer_all = tensorfile.read(argv[0]), tensorfile.read(argv[1])
    lr, mu = float(argv[2]), float(argv[3])
    inner = [params(p) for p in argv[4:]]
    assert len(inner) >= 2, "give two or more replicas' files"
    start, outer = params(argv[0]), params(argv[1])
    assert start and all(r.keys() == start.keys() for r in inner + [outer]), "different parameters"
    differ = sum(1 for name in start for values in zip(*(r[name] for r in inner))
                 if len(set(values)) > 1)
    assert differ, "the replicas hold the same parameters: their mean cannot be told from a sum"
    worst = 0.0
    for name in sorted(start):
        v0 = start_all.get(name + ".outer_v", [0.0] * len(start[name]))
        v1 = outer_all[name + ".outer_v"]
        for j, s in enumerate(start[name]):
            delta = sum(s - r[name][j] for r in inner) / len(inner)
            v = mu * v0[j] + delta
            worst = max(worst, close(v1[j], v, f"{name}.outer_v[{j}]", 1e-5))
            worst = max(worst, close(outer[name][j], s - lr * (delta + mu * v),
                                     f"{name}[{j}] (start {s})", 1e-5))
    print(f"outer step of {len(inner)} replicas exact over {len(start)} parameters "
          f"({differ} values differ between replicas), max relative difference {worst:.2g}")


if sys.argv[1] == "--replicas":
    replicas(sys.argv[2:])
else:
    one_replica(sys.argv[1:])
