#!/usr/bin/env python3
"""Counts the AVX512-FP16 instructions in `objdump -d` output on stdin:
vmovw, and the half-precision arithmetic and conversions (v...ph and v...sh
forms, vcvtph2psx / vcvtps2phx), but not F16C's vcvtph2ps / vcvtps2ph, which
every AVX2 CPU has. Prints "N AVX512-FP16 instructions" and the first few."""
import re
import sys

FP16 = re.compile(r"^(vmovw|vcvtph2psx|vcvtps2phx|v[a-z0-9]+(ph|sh))$")
F16C = {"vcvtps2ph"}

found = []
for line in sys.stdin:
    parts = line.split("\t")
    if len(parts) < 2:
        continue
    mnemonic = parts[1].split()[0] if parts[1].split() else ""
    if FP16.match(mnemonic) and mnemonic not in F16C:
        found.append(mnemonic)
print(f"{len(found)} AVX512-FP16 instructions")
for m in sorted(set(found))[:8]:
    print("  " + m)
