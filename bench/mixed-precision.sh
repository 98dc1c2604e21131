#!/usr/bin/env bash
# Mixed precision (docs/MixedPrecision.md) against f32 on real text: the
# tiny example in f32, bf16 and f16 (dynamic loss scaling), STEPS steps
# (300) of the King James Bible on one thread, for each seed of SEEDS
# ("1 2 3"); then the small example in f32 and bf16, SMALL_STEPS steps (60)
# on THREADS threads (2). Reported per run: the final validation loss
# (against f32's of the same seed), the peak resident memory and the
# median tokens/s after the first sixth of the steps. Part of `make bench`.
#   bench/mixed-precision.sh [BUILD_DIR]   env: STEPS, SEEDS, SMALL_STEPS, THREADS
set -euo pipefail
build=${1:-build}
steps=${STEPS:-300}
seeds=${SEEDS:-1 2 3}
small_steps=${SMALL_STEPS:-60}
threads=${THREADS:-2}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
export OPENBLAS_NUM_THREADS=1
for model in tiny small; do
  for dtype in f32 bf16 f16; do
    [ "$model" = small ] && [ "$dtype" = f16 ] && continue
    "$py" -c "import json, sys; m = json.load(open(sys.argv[1])); m['dtype'] = sys.argv[3]; json.dump(m, open(sys.argv[2], 'w'), indent=1)" \
      "examples/models/$model.json" "$out/mp-$model-$dtype.json" "$dtype"
    "$build/bin/moec" "$out/mp-$model-$dtype.json" -o "$out/mp-$model-$dtype" >/dev/null
  done
done
report() { # metrics files: dtype seed path...
  "$py" - "$@" <<'PY'
import json, statistics, sys
rows = {}
for path in sys.argv[1:]:
    lines = [json.loads(l) for l in open(path)]
    steps = [l for l in lines if "tokens_per_s" in l]
    val = [l["val_loss"] for l in lines if "val_loss" in l]
    rss = [l["peak_rss_bytes"] for l in lines if "peak_rss_bytes" in l]
    skip = len(steps) // 6
    name = path.rsplit("/", 1)[1].rsplit(".", 1)[0]
    rows[name] = (val[-1] if val else float("nan"), rss[-1] / 2**20 if rss else float("nan"),
                  statistics.median(s["tokens_per_s"] for s in steps[skip:]))
base = {}
for name, (val, rss, tps) in rows.items():
    key = name.replace("-bf16-", "-X-").replace("-f16-", "-X-").replace("-f32-", "-X-")
    if "-f32-" in name:
        base[key] = (val, rss, tps)
for name, (val, rss, tps) in rows.items():
    key = name.replace("-bf16-", "-X-").replace("-f16-", "-X-").replace("-f32-", "-X-")
    b = base.get(key)
    rel = "" if not b or "-f32-" in name else "  (%+.1f%% loss, %.2fx memory, %.2fx tokens/s)" % (
        100 * (val / b[0] - 1), rss / b[1], tps / b[2])
    print("%-22s validation %.4f  peak %7.1f MB  %8.0f tok/s%s" % (name, val, rss, tps, rel))
PY
}
echo "== mixed precision: tiny, $steps steps, 1 thread, seeds $seeds"
files=()
for seed in $seeds; do
  for dtype in f32 bf16 f16; do
    m="$out/mp-tiny-$dtype-$seed.jsonl"
    "$out/mp-tiny-$dtype" --data "$corpus" --steps "$steps" --seed "$seed" --threads 1 \
      --no-progress --metrics "$m" >/dev/null
    files+=("$m")
  done
done
report "${files[@]}"
echo "== mixed precision: small, $small_steps steps, $threads threads"
files=()
for dtype in f32 bf16; do
  m="$out/mp-small-$dtype-1.jsonl"
  "$out/mp-small-$dtype" --data "$corpus" --steps "$small_steps" --threads "$threads" \
    --no-progress --metrics "$m" >/dev/null
  files+=("$m")
done
report "${files[@]}"
