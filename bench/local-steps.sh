#!/usr/bin/env bash
# Local steps (DiLoCo) against synchronous data parallelism on real text:
# the tiny example (sequences of 128, 8 per replica) on 2 data-parallel
# thread ranks, STEPS steps (300) of the King James Bible over an emulated
# link of LINK (0.2 GB/s, 50 us per message: --emulate-link), synchronous
# and with each RUNS entry H:LR:MU[:SYNC[:CODEC]] (--local-steps H --outer-lr LR
# --outer-momentum MU [--sync-steps SYNC] [--outer-codec CODEC]; default: plain averaging, LR 1
# and MU 0, at H 4, 8 and 16, H 8 after 30 synchronous steps, and DiLoCo's
# 0.7 and 0.9 at H 16 and 64; "stale[:0:0:SYNC]": --staleness 1, delayed
# gradients, after SYNC synchronous steps),
# for each seed of SEEDS
# ("1"). Reported: the final validation loss (against the synchronous
# run's), the median tokens/s and the all-reduce bytes per step and rank
# (mean). Part of `make bench`.
#   bench/local-steps.sh [BUILD_DIR]    env: STEPS (300), RUNS, LINK, SEEDS ("1")
set -euo pipefail
build=${1:-build}
steps=${STEPS:-300}
runs=${RUNS:-4:1:0 8:1:0 8:1:0:30 16:1:0 16:0.7:0.9 64:0.7:0.9}
link=${LINK:-0.2,50}
seeds=${SEEDS:-1}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo "== local steps (DiLoCo) vs synchronous: tiny, 2 data replicas, $steps steps, link $link GB/s,us"
"$py" - examples/models/tiny.json "$out/ls-tiny.json" "$steps" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "ls-tiny"
m["seq_len"], m["batch_size"] = 128, 16
m["optimizer"]["total_steps"] = max(int(sys.argv[3]), m["optimizer"]["warmup_steps"])
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
"$build/bin/moec" "$out/ls-tiny.json" --ranks 2 --ep 1 -o "$out/ls-dp2" >/dev/null
: > "$out/local-steps.jsonl"
for seed in $seeds; do
  for run in sync $runs; do
    metrics="$out/ls-$run-$seed.jsonl"
    rm -f "$metrics"
    local=()
    IFS=: read -r h lr mu sync codec <<< "$run"
    if [ "$h" = stale ]; then
      local=(--staleness 1 --sync-steps "${sync:-0}")
    elif [ "$run" != sync ]; then
      local=(--local-steps "$h" --outer-lr "$lr" --outer-momentum "$mu" --sync-steps "${sync:-0}")
      [ -z "${codec:-}" ] || local+=(--outer-codec "$codec")
    fi
    "$out/ls-dp2" --data "$corpus" --steps "$steps" --seed "$seed" --no-progress \
      --emulate-link "$link" --eval-every "$steps" --metrics "$metrics" "${local[@]}" >/dev/null
    "$py" - "$metrics" "$run" "$seed" >> "$out/local-steps.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r and "step" in r]
print(json.dumps({"run": sys.argv[2], "seed": int(sys.argv[3]),
                  "val_loss": [r["val_loss"] for r in rows if "val_loss" in r][-1],
                  "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps),
                  "all_reduce_bytes": statistics.mean(r["comm_bytes"]["all_reduce"] + r["codec_bytes"]["sent"] for r in steps)}))
PY
  done
done
"$py" - "$out/local-steps.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("%-16s %5s %9s %9s %9s %8s %14s" % ("H:lr:mu[:sync]", "seed", "val loss", "vs sync", "tok/s", "speed-up", "AR B/step"))
for r in rows:
    sync = next(s for s in rows if s["seed"] == r["seed"] and s["run"] == "sync")
    print("%-16s %5d %9.4f %+8.2f%% %9.0f %7.2fx %14.0f" % (
        r["run"], r["seed"], r["val_loss"],
        100 * (r["val_loss"] / sync["val_loss"] - 1), r["tokens_per_s"],
        r["tokens_per_s"] / sync["tokens_per_s"], r["all_reduce_bytes"]))
PY
