"""Prints the OpenBLAS core a MoEC training binary selects on this CPU
(runtime/lib/BlasCore.cpp: the best core the CPU runs when OpenBLAS's own
choice is weaker, for example its Prescott fallback on CPUs newer than the
release), or nothing when OpenBLAS's choice stands. The benchmarks export
it as OPENBLAS_CORETYPE to the peers (PyTorch, plain OpenBLAS), so both
sides run the same kernels.
    python3 bench/blas_core.py
"""
import ctypes
import ctypes.util
import os
import platform

LEVELS = {"prescott": 0, "core2": 0, "penryn": 0, "dunnington": 0, "nehalem": 0,
          "atom": 0, "barcelona": 0, "bobcat": 0, "sandybridge": 1, "bulldozer": 1,
          "piledriver": 1, "steamroller": 1, "excavator": 1, "haswell": 2, "zen": 2,
          "skylakex": 3, "cooperlake": 4, "sapphirerapids": 4}


def best_core(flags):
    if {"avx512_bf16", "avx512bw", "avx512vl"} <= flags:
        return "Cooperlake", 4
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX", 3
    if {"avx2", "fma"} <= flags:
        return "Haswell", 2
    if "avx" in flags:
        return "Sandybridge", 1
    return None, 0


def selected_core():
    """The core a training binary selects, or None when OpenBLAS's stands."""
    if platform.machine() != "x86_64" or os.environ.get("OPENBLAS_CORETYPE"):
        return None
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    lib = ctypes.CDLL(ctypes.util.find_library("openblas") or "libopenblas.so.0")
    lib.openblas_get_corename.restype = ctypes.c_char_p
    have = LEVELS.get(lib.openblas_get_corename().decode().lower(), -1)
    core, level = best_core(flags)
    return core if core and have >= 0 and level > have else None


if __name__ == "__main__":
    print(selected_core() or "")
