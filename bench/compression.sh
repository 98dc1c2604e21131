#!/usr/bin/env bash
# Convergence and bytes of compressed gradient all-reduces: the tiny model on
# the King James Bible, 2 ranks (ep 2), STEPS steps (300) per codec, the same
# seed and batches; final validation loss against the uncompressed run, and
# the all-reduce bytes per step against the uncompressed ring volume. Part
# of `make bench`.
#   bench/compression.sh [BUILD_DIR]    env: STEPS (300), WARMUP (30), RUNS (all)
set -euo pipefail
build=${1:-build}
steps=${STEPS:-300}
warmup=${WARMUP:-30}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo "== compressed gradient all-reduces: tiny, 2 ranks, $steps steps ($warmup uncompressed)"
: > "$out/compression.jsonl"
for run in ${RUNS:-none int8 powersgd:4 topk:0.01 topk:0.01/no-ef sign sign/no-ef}; do
  codec=${run%/no-ef}
  flags=()
  [ "$codec" != none ] && flags=(--compress-grad "$codec" --compress-warmup "$warmup")
  [ "$run" != "$codec" ] && flags+=(--no-error-feedback)
  bin="$out/tiny-codec-$(echo "$run" | tr ':./' '___')"
  "$build/bin/moec" examples/models/tiny.json --ranks 2 "${flags[@]}" -o "$bin" >/dev/null
  rm -f "$bin.jsonl"
  "$bin" --data "$corpus" --steps "$steps" --eval-every 100 --no-progress \
    --metrics "$bin.jsonl" >/dev/null
  "$py" - "$bin.jsonl" "$run" >> "$out/compression.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
val = [r["val_loss"] for r in rows if "val_loss" in r][-1]
steps = [r for r in rows if "codec_bytes" in r]
last = steps[-1]
# All-reduce bytes: the compressed reductions' plus those left exact (the
# loss's mean; vectors under top-k, sign and PowerSGD).
sent = last["codec_bytes"]["sent"] + last["comm_bytes"]["all_reduce"]
plain = last["codec_bytes"]["uncompressed"] + last["comm_bytes"]["all_reduce"]
exact = all(r["codec_bytes"]["sent"] == r["codec_bytes"]["expected"] for r in steps)
print(json.dumps({"run": sys.argv[2], "val_loss": val, "sent": sent, "uncompressed": plain,
                  "formula_exact": exact}))
PY
done
"$py" - "$out/compression.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = rows[0]["val_loss"]
print("%-16s %10s %9s %16s %10s %s" % ("codec", "val loss", "vs none", "B/step/rank", "reduction", "bytes = formula"))
for r in rows:
    print("%-16s %10.4f %+8.2f%% %16d %9.1fx %s" % (r["run"], r["val_loss"], 100 * (r["val_loss"] / base - 1),
          r["sent"], r["uncompressed"] / r["sent"], "yes" if r["formula_exact"] else "NO"))
PY
