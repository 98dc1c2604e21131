#!/usr/bin/env python3
"""Checks the compressed all-reduce bytes of a metrics log:
check-codec.py LOG WARMUP MIN_REDUCTION. Every step after WARMUP sends
exactly the compiler's formula and at least MIN_REDUCTION times less than
the uncompressed all-reduces; warm-up steps send nothing compressed."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if '"codec_bytes"' in l]
warmup, least = int(sys.argv[2]), float(sys.argv[3])
if not rows:
    sys.exit("no steps in the log")
for r in rows:
    c = r["codec_bytes"]
    if r["step"] <= warmup:
        if c["sent"] != 0 or c["expected"] != 0:
            sys.exit(f"warm-up step {r['step']} sent compressed bytes: {c}")
        continue
    if c["sent"] != c["expected"] or c["sent"] <= 0:
        sys.exit(f"step {r['step']}: sent {c['sent']}, the formula says {c['expected']}")
    if c["uncompressed"] / c["sent"] < least:
        sys.exit(f"step {r['step']}: {c['uncompressed'] / c['sent']:.2f}x, less than {least}x")
compressed = len(rows) - min(warmup, len(rows))
ratio = rows[-1]["codec_bytes"]["uncompressed"] / rows[-1]["codec_bytes"]["sent"]
print(f"{compressed} compressed steps send the formula's bytes, {ratio:.1f}x less; "
      f"{min(warmup, len(rows))} warm-up steps send none")
