#!/usr/bin/env bash
# Expert load balancing on real text: a 16-expert top-2 model (the tiny
# example's shape with 16 experts, sequences of 128, batches of 16) trained
# STEPS steps (300) on the King James Bible, the same seeds and batches, with
#   aux       the Switch auxiliary loss alone (coefficient 0.01),
#   bias      DeepSeek-V3's selection bias with its load rule (u = 0.001) and
#             the same auxiliary loss,
#   bias-only the selection bias alone (auxiliary loss 0),
#   bias-fast the selection bias alone with u = 0.01,
# for each of SEEDS (1 2 3). Reported over steps 100-STEPS: the share of
# token-slots dropped past capacity (factor 1.25), the mean over steps and
# layers of the max/mean expert load, and the final validation loss. Part of
# `make bench`.
#   bench/load-balance.sh [BUILD_DIR]    env: STEPS (300), SEEDS ("1 2 3")
set -euo pipefail
build=${1:-build}
steps=${STEPS:-300}
seeds=${SEEDS:-1 2 3}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo "== load balancing: 16 experts top-2, $steps steps per run, seeds $seeds"
: > "$out/load-balance.jsonl"
for run in aux bias bias-only bias-fast; do
  model="$out/lb-$run.json"
  "$py" - examples/models/tiny.json "$model" "$run" "$steps" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
run, steps = sys.argv[3], int(sys.argv[4])
m["name"] = "lb-" + run
m["seq_len"], m["batch_size"] = 128, 16
m["moe"].update({"num_experts": 16, "top_k": 2, "expert_ffn_dim": 64, "capacity_factor": 1.25})
if run != "aux":
    m["moe"]["router_bias"] = True
    m["moe"]["router_bias_update_rate"] = 0.01 if run == "bias-fast" else 0.001
if run in ("bias-only", "bias-fast"):
    m["moe"]["aux_loss_coef"] = 0.0
m["optimizer"]["total_steps"] = max(steps, m["optimizer"]["warmup_steps"])
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
  "$build/bin/moec" "$model" -o "$out/lb-$run" >/dev/null
  for seed in $seeds; do
    rm -f "$out/lb-$run-$seed.jsonl"
    "$out/lb-$run" --data "$corpus" --steps "$steps" --seed "$seed" --eval-every "$steps" \
      --no-progress --metrics "$out/lb-$run-$seed.jsonl" >/dev/null
    "$py" - "$out/lb-$run-$seed.jsonl" "$run" "$seed" "$steps" >> "$out/load-balance.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = int(sys.argv[4])
first = min(100, steps // 3)
train = [r for r in rows if "expert_tokens" in r and r["step"] > first]
slots = sum(sum(sum(layer) for layer in r["expert_tokens"]) for r in train)
dropped = sum(r["dropped_tokens"] for r in train)
ratios = [max(layer) * len(layer) / sum(layer) for r in train for layer in r["expert_tokens"]]
val = [r["val_loss"] for r in rows if "val_loss" in r][-1]
print(json.dumps({"run": sys.argv[2], "seed": int(sys.argv[3]), "from_step": first + 1,
                  "dropped_share": dropped / slots, "max_over_mean": sum(ratios) / len(ratios),
                  "val_loss": val}))
PY
  done
done
"$py" - "$out/load-balance.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("%-10s %5s %14s %14s %9s" % ("run", "seed", "dropped slots", "max/mean load", "val loss"))
for r in rows:
    print("%-10s %5d %13.2f%% %14.3f %9.4f" % (r["run"], r["seed"], 100 * r["dropped_share"],
                                              r["max_over_mean"], r["val_loss"]))
print("medians over seeds (steps %d on):" % rows[0]["from_step"])
for run in dict.fromkeys(r["run"] for r in rows):
    rs = [r for r in rows if r["run"] == run]
    print("%-10s %5s %13.2f%% %14.3f %9.4f" % (
        run, "", 100 * statistics.median(r["dropped_share"] for r in rs),
        statistics.median(r["max_over_mean"] for r in rs),
        statistics.median(r["val_loss"] for r in rs)))
PY
