#!/usr/bin/env bash
# Does the cost model rank plans as they run? The tiny model on this
# machine as thread ranks: for each grid (ranks x ep) a cluster file of one
# host with that many ranks sharing its cores (`host_cores`), the
# planner's predicted step time (moec --cluster --emit=plan, the forced
# degrees) and the measured tokens/s of the binary moec builds for it,
# medians over interleaved rounds. Prints both rankings, Kendall's tau, and
# how many pairs measured more than 10% apart the model orders right.
# Part of `make bench`.
#   bench/plan-ranking.sh [BUILD_DIR]    env: ROUNDS (3), STEPS (30), PLANS
set -euo pipefail
build=${1:-build}
rounds=${ROUNDS:-3}
steps=${STEPS:-30}
plans=${PLANS:-"1:1 2:1 2:2 4:1 4:2 4:4 8:1 8:2 8:4"}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
cores=$(nproc)
echo "== plan ranking: tiny as thread ranks on this $cores-core host, $rounds rounds interleaved"
: > "$out/plan-ranking.jsonl"
: > "$out/plan-predicted.jsonl"
for plan in $plans; do
  n=${plan%%:*}; ep=${plan##*:}
  name="tiny-plan-r$n-ep$ep"
  cluster="$out/$name.cluster.json"
  echo "{\"name\": \"this-host-$n-ranks\", \"nodes\": [{\"count\": 1, \"device\": \"local-cpu\", \"devices_per_node\": $n, \"host_cores\": $cores}]}" > "$cluster"
  "$build/bin/moec" examples/models/tiny.json --cluster "$cluster" --dp $((n / ep)) --ep "$ep" \
    --emit=plan -o "$out/$name.plan.json"
  "$build/bin/moec" examples/models/tiny.json --cluster "$cluster" --dp $((n / ep)) --ep "$ep" \
    -o "$out/$name" 2>/dev/null
  "$py" - "$out/$name.plan.json" "$name" >> "$out/plan-predicted.jsonl" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["sharding"]["candidates"][0]
print(json.dumps({"binary": sys.argv[2], "predicted_s": c["step_s"], "compute_s": c["compute_s"],
                  "all_reduce_s": c["all_reduce_s"], "all_to_all_s": c["all_to_all_s"]}))
PY
done
for r in $(seq "$rounds"); do
  for plan in $plans; do
    n=${plan%%:*}; ep=${plan##*:}
    name="tiny-plan-r$n-ep$ep"
    rm -f "$out/$name.jsonl"
    "$out/$name" --data "$corpus" --steps "$steps" --val-fraction 0 --no-progress \
      --metrics "$out/$name.jsonl" >/dev/null
    "$py" - "$out/$name.jsonl" "$name" >> "$out/plan-ranking.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l][3:]
print(json.dumps({"binary": sys.argv[2], "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows)}))
PY
  done
done
"$py" - "$out/plan-predicted.jsonl" "$out/plan-ranking.jsonl" <<'PY'
import itertools, json, statistics, sys
pred = {r["binary"]: r for r in map(json.loads, open(sys.argv[1]))}
runs = [json.loads(l) for l in open(sys.argv[2])]
meas = {b: statistics.median(r["tokens_per_s"] for r in runs if r["binary"] == b) for b in pred}
names = list(pred)
by_pred = sorted(names, key=lambda b: pred[b]["predicted_s"])
by_meas = sorted(names, key=lambda b: -meas[b])
print("%-18s %13s %11s %11s %13s %9s %9s" % ("plan", "predicted ms", "compute ms", "comm ms",
      "measured tok/s", "pred rank", "meas rank"))
for b in by_pred:
    p = pred[b]
    print("%-18s %13.2f %11.2f %11.2f %13.0f %9d %9d" % (b, 1e3 * p["predicted_s"], 1e3 * p["compute_s"],
          1e3 * (p["all_reduce_s"] + p["all_to_all_s"]), meas[b], by_pred.index(b) + 1, by_meas.index(b) + 1))
concordant = discordant = 0
apart = apart_right = 0
for a, b in itertools.combinations(names, 2):
    s = (pred[a]["predicted_s"] - pred[b]["predicted_s"]) * (meas[b] - meas[a])  # > 0: same order
    concordant += s > 0
    discordant += s < 0
    if max(meas[a], meas[b]) > 1.1 * min(meas[a], meas[b]):
        apart += 1
        apart_right += s > 0
pairs = concordant + discordant
print("Kendall tau %.2f over %d pairs; pairs measured >10%% apart ordered as predicted: %d of %d"
      % ((concordant - discordant) / max(pairs, 1), pairs, apart_right, apart))
PY
