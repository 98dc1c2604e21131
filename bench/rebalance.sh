#!/usr/bin/env bash
# Online rebalancing on a skewed case: the tiny example with 16 experts and
# no auxiliary loss (routing concentrates on a few experts) on 4 thread
# ranks (ep 4, 4 experts each), STEPS steps (200) of the King James Bible,
# without and with --rebalance-every EVERY (20), and with REDUNDANT (8) spare
# positions (moec --redundant-experts: two per rank, filled with replicas of
# the hottest experts by the rebalancer). Reported: the migrations,
# the mean balancedness (mean over max of the ranks' kept token-slots) over the
# steps after the first migration, and the median tokens/s over the same
# steps; the losses of both runs are compared. Part of `make bench`.
#   bench/rebalance.sh [BUILD_DIR]    env: STEPS (200), EVERY (20), REDUNDANT (8)
set -euo pipefail
build=${1:-build}
steps=${STEPS:-200}
every=${EVERY:-20}
redundant=${REDUNDANT:-8}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo "== online rebalancing: 16 experts, no auxiliary loss, 4 thread ranks, $steps steps"
"$py" - examples/models/tiny.json "$out/rb-skewed.json" "$steps" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "rb-skewed"
m["moe"].update({"num_experts": 16, "expert_ffn_dim": 64, "aux_loss_coef": 0.0})
m["batch_size"] = 8
m["optimizer"]["total_steps"] = max(int(sys.argv[3]), m["optimizer"]["warmup_steps"])
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
"$build/bin/moec" "$out/rb-skewed.json" --ranks 4 -o "$out/rb-skewed" >/dev/null
"$build/bin/moec" "$out/rb-skewed.json" --ranks 4 --redundant-experts "$redundant" \
  -o "$out/rb-spare" >/dev/null
rm -f "$out/rb-fixed.jsonl" "$out/rb-moving.jsonl" "$out/rb-replicas.jsonl"
"$out/rb-skewed" --data "$corpus" --steps "$steps" --no-progress --metrics "$out/rb-fixed.jsonl" >/dev/null
"$out/rb-skewed" --data "$corpus" --steps "$steps" --no-progress --rebalance-every "$every" \
  --metrics "$out/rb-moving.jsonl" >/dev/null
"$out/rb-spare" --data "$corpus" --steps "$steps" --no-progress --rebalance-every "$every" \
  --metrics "$out/rb-replicas.jsonl" >/dev/null
"$py" - "$out/rb-fixed.jsonl" "$out/rb-moving.jsonl" "$out/rb-replicas.jsonl" <<'PY'
import json, statistics, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:4]]
names = ("fixed", "rebalanced", "+replicas")
first = 0
for name, rows in zip(names[1:], runs[1:]):
    moves = [r for r in rows if "migration" in r]
    for m in moves:
        g = m["migration"]
        print("%s: step %d: moved %d experts (layers %s), balancedness %s -> %s predicted" % (
            name, m["step"], g["experts_moved"], g["layers"],
            " ".join("%.2f" % b for b in g["balancedness_before"]),
            " ".join("%.2f" % b for b in g["balancedness_predicted"])))
    first = max(first, moves[0]["step"] if moves else 0)
for name, rows in zip(names, runs):
    steps = [r for r in rows if "loss" in r and r["step"] > first]
    bal = statistics.mean(statistics.mean(r["balancedness"]) for r in steps)
    tps = statistics.median(r["tokens_per_s"] for r in steps)
    print("%-11s balancedness %.3f  median %.0f tok/s  (steps %d-%d)" % (name, bal, tps, first + 1, steps[-1]["step"]))
a = {r["step"]: r["loss"] for r in runs[0] if "loss" in r}
for name, rows in zip(names[1:], runs[1:]):
    b = {r["step"]: r["loss"] for r in rows if "loss" in r}
    print("%s: %d migrations; max relative loss difference to fixed %.2g" % (
        name, sum("migration" in r for r in rows), max(abs(a[s] - b[s]) / abs(a[s]) for s in a)))
PY

# The same on 2 ranks with expert-heavy layers (width 128, 16 experts of
# width 512: 8 of width 1024 were too coarse for whole-expert moves to
# reach 0.9; no auxiliary loss, OpenBLAS GEMMs so experts compute routed
# rows only, one kernel and one OpenBLAS thread per rank: each rank its own
# core, so the most loaded rank sets the step time): fixed placement, moves
# only, and moves with 2 spare positions (one replica per rank), ROUNDS (3)
# alternating rounds of STEPS steps; medians of the steps after the first
# migration window.
echo "== online rebalancing: 16 expert-heavy experts, no auxiliary loss, 2 thread ranks, $steps steps"
"$py" - examples/models/tiny.json "$out/rb2.json" "$steps" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "rb2"
m["d_model"], m["ffn_dim"] = 128, 256
m["moe"].update({"num_experts": 16, "expert_ffn_dim": 512, "num_shared_experts": 0,
                 "aux_loss_coef": 0.0})
m["optimizer"]["total_steps"] = max(int(sys.argv[3]), m["optimizer"]["warmup_steps"])
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
"$build/bin/moec" "$out/rb2.json" --ranks 2 --ep 2 --gemm=blas -o "$out/rb2-fixed" >/dev/null
"$build/bin/moec" "$out/rb2.json" --ranks 2 --ep 2 --gemm=blas --redundant-experts 2 \
  -o "$out/rb2-spare" >/dev/null
rounds=${ROUNDS:-3}
for round in $(seq "$rounds"); do
  for run in fixed moving replicas; do
    bin=rb2-fixed flags=()
    [ "$run" = fixed ] || flags=(--rebalance-every "$every")
    [ "$run" = replicas ] && bin=rb2-spare
    rm -f "$out/rb2-$run-$round.jsonl"
    OPENBLAS_NUM_THREADS=1 "$out/$bin" --data "$corpus" --steps "$steps" --no-progress \
      --ranks 2 --threads 1 "${flags[@]}" --metrics "$out/rb2-$run-$round.jsonl" >/dev/null
  done
done
"$py" - "$out" "$rounds" "$every" <<'PY'
import json, statistics, sys
out, rounds, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = ("fixed", "moving", "replicas")
result = {n: ([], [], []) for n in names}
for r in range(1, rounds + 1):
    for n in names:
        rows = [json.loads(l) for l in open("%s/rb2-%s-%d.jsonl" % (out, n, r))]
        steps = [x for x in rows if "loss" in x and x["step"] > every]
        result[n][0].append(statistics.mean(statistics.mean(x["balancedness"]) for x in steps))
        result[n][1].append(statistics.median(x["step_seconds"] for x in steps))
        result[n][2].append(sum("migration" in x for x in rows))
base = result["fixed"][1]
for n in names:
    bal, sec, moves = result[n]
    print("%-9s balancedness %.3f  median step %.1f ms (rounds %s)  %.2fx fixed  migrations %s" % (
        n, statistics.median(bal), 1e3 * statistics.median(sec),
        ", ".join("%.1f" % (1e3 * s) for s in sec),
        statistics.median(s / b for s, b in zip(sec, base)), moves))
PY
