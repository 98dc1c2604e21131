#!/usr/bin/env bash
# A mixed cluster emulated on one machine: examples/clusters/local-cpu-mixed.json
# (this machine's preset and a kind at half its speed, one rank each), an
# expert-heavy model (the tiny example at width 128 with EXPERTS (12)
# experts of width 1024 and a global batch of BATCH (12) sequences, OpenBLAS
# GEMMs so that experts compute routed rows only), STEPS steps (60) of the
# King James Bible with rank 1 computing at half speed (--emulate-cluster
# 1,0.5; one kernel thread per rank, as a device). 12 and 12 let the
# planner's whole-number shares equal the speeds (8 and 4 of each), so the
# bound is 0.67x; with 8 experts and 8 sequences the shares are 5 and 3 and
# the bound is 0.75x.
# Compared: the planner's plan for the cluster (moec --cluster: token
# shares proportional to speed in whole sequences, and the faster rank
# holding more experts) against the uniform plan (--ranks 2 --ep 2: half
# the sequences and half the experts each). Reported: the median step
# time over the steps after the 10th and their ratio, and the largest loss
# difference against the one-rank oracle of each (one rank routing in the
# same groups: the plans do not change what each computes). Part of `make
# bench`.
# Two regimes: the first STEPS steps from initialisation (routing still
# skewed; which experts are hot depends on the model's SEED, 1234) and STEPS
# steps after WARM (200) steps of training (balanced); and, for the two
# plans without rebalancing, a whole run of WHOLE steps (300; 0 skips it)
# from initialisation, the median over its steps after the 10th: what a
# training run of that length sees.
#   bench/mixed-cluster.sh [BUILD_DIR]
#   env: STEPS (60), WARM (200), WHOLE (300), ROUNDS (3), EXPERTS (12), BATCH (12),
#        SEED (1234)
set -euo pipefail
build=${1:-build}
steps=${STEPS:-60}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo "== emulated mixed cluster: rank 1 at half speed, $steps steps"
"$py" - examples/models/tiny.json "$out/mx-model.json" "${EXPERTS:-12}" "${BATCH:-12}" "${SEED:-1234}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"], m["seed"] = "mx-experts", int(sys.argv[5])
m["d_model"], m["ffn_dim"], m["batch_size"] = 128, 256, int(sys.argv[4])
m["moe"].update({"num_experts": int(sys.argv[3]), "expert_ffn_dim": 1024,
                 "num_shared_experts": 0})
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
"$build/bin/moec" "$out/mx-model.json" --cluster examples/clusters/local-cpu-mixed.json \
  --emit=plan -o "$out/mx-plan.json" 2>/dev/null
"$build/bin/moec" "$out/mx-model.json" --cluster examples/clusters/local-cpu-mixed.json \
  --gemm=blas -o "$out/mx-planned" >/dev/null
"$build/bin/moec" "$out/mx-model.json" --ranks 2 --ep 2 --gemm=blas -o "$out/mx-uniform" >/dev/null
"$build/bin/moec" "$out/mx-model.json" --cluster examples/clusters/local-cpu-mixed.json \
  --emit=mlir -o "$out/mx-planned.mlir"
shares=$(grep -o -m1 'moe.token_shares = array<i64: [0-9, ]*>' "$out/mx-planned.mlir" |
  sed 's/.*: //; s/>//; s/ //g')
[ -n "$shares" ] || { echo "the planner gave no unequal token shares" >&2; exit 1; }
echo "planned token shares: $shares sequences"
# The one-rank oracles: the same routing groups on one rank.
"$build/bin/moec" "$out/mx-model.json" --token-shares "$shares" --gemm=blas -o "$out/mx-planned-oracle" >/dev/null
"$build/bin/moec" "$out/mx-model.json" --routing-groups 2 --gemm=blas -o "$out/mx-uniform-oracle" >/dev/null
for run in planned uniform; do
  rm -f "$out/mx-$run-oracle.jsonl"
  OPENBLAS_NUM_THREADS=1 "$out/mx-$run-oracle" --data "$corpus" --steps "$steps" --no-progress \
    --threads 1 --metrics "$out/mx-$run-oracle.jsonl" >/dev/null
done
rounds=${ROUNDS:-3}
warm=${WARM:-200}
whole=${WHOLE:-300}
# The balanced regime: WARM steps (200) of the uniform binary without
# emulation (the auxiliary loss evens the routing out), then both binaries
# resume from that checkpoint.
rm -rf "$out/mx-warm"
OPENBLAS_NUM_THREADS=1 "$out/mx-uniform" --data "$corpus" --steps "$warm" --no-progress \
  --ranks 2 --threads 1 --checkpoint "$out/mx-warm" >/dev/null
# Each plan also runs with online rebalancing (--rebalance-every 10, speed
# aware): "planned+rebalance" and "uniform+rebalance".
for round in $(seq "$rounds"); do
  for run in planned uniform planned+rebalance uniform+rebalance; do
    binary=${run%+rebalance}
    extra=()
    [ "$binary" = "$run" ] || extra=(--rebalance-every 10)
    rm -f "$out/mx-$run-$round.jsonl" "$out/mx-$run-warm-$round.jsonl"
    OPENBLAS_NUM_THREADS=1 "$out/mx-$binary" --data "$corpus" --steps "$steps" --no-progress \
      --ranks 2 --threads 1 "${extra[@]}" \
      --emulate-cluster 1,0.5 --metrics "$out/mx-$run-$round.jsonl" >/dev/null
    rm -rf "$out/mx-warm-$run"
    cp -r "$out/mx-warm" "$out/mx-warm-$run"
    OPENBLAS_NUM_THREADS=1 "$out/mx-$binary" --data "$corpus" --steps $((warm + steps)) \
      --no-progress --ranks 2 --threads 1 --emulate-cluster 1,0.5 "${extra[@]}" \
      --checkpoint "$out/mx-warm-$run" --resume --metrics "$out/mx-$run-warm-$round.jsonl" >/dev/null
  done
  for run in $([ "$whole" -gt 0 ] && echo planned uniform); do
    rm -f "$out/mx-$run-whole-$round.jsonl"
    OPENBLAS_NUM_THREADS=1 "$out/mx-$run" --data "$corpus" --steps "$whole" --no-progress \
      --ranks 2 --threads 1 --emulate-cluster 1,0.5 --metrics "$out/mx-$run-whole-$round.jsonl" \
      >/dev/null
  done
done
"$py" - "$out" "$rounds" "$warm" "$whole" <<'PY'
import json, statistics, sys
out, rounds, whole = sys.argv[1], int(sys.argv[2]), int(sys.argv[4])
def rows(path):
    return [json.loads(l) for l in open(path) if '"loss"' in l]
def diff(a, b):
    return max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
runs = ("planned", "uniform", "planned+rebalance", "uniform+rebalance")
for regime, suffix in (("first steps", ""), ("after %d steps" % int(sys.argv[3]), "-warm")):
    ratios = {run: [] for run in runs}
    for r in range(1, rounds + 1):
        logs = [rows("%s/mx-%s%s-%d.jsonl" % (out, run, suffix, r)) for run in runs]
        med = [statistics.median(x["step_seconds"] for x in log[10:]) for log in logs]
        bal = [statistics.mean(statistics.mean(x["balancedness"]) for x in log[10:])
               for log in logs]
        for run, m in zip(runs, med):
            ratios[run].append(m / med[1])
        line = ("%s, round %d: " % (regime, r) +
                ", ".join("%s %.2f ms/step (%.2fx, balancedness %.2f)"
                          % (run, 1e3 * m, m / med[1], b) for run, m, b in zip(runs, med, bal)))
        if not suffix:
            line += ("; max relative loss difference against the one-rank oracle over steps "
                     "1-40 %.2g (planned), %.2g (uniform)"
                     % (diff(logs[0][:40], rows(out + "/mx-planned-oracle.jsonl")),
                        diff(logs[1][:40], rows(out + "/mx-uniform-oracle.jsonl"))))
        print(line)
    print("%s: step time over the uniform plan's, median of %d alternating rounds: %s"
          % (regime, rounds, ", ".join("%s %.2fx" % (run, statistics.median(ratios[run]))
                                       for run in runs if run != "uniform")))
if whole > 0:
    ratios = []
    for r in range(1, rounds + 1):
        med = [statistics.median(x["step_seconds"] for x in rows(
            "%s/mx-%s-whole-%d.jsonl" % (out, run, r))[10:]) for run in ("planned", "uniform")]
        ratios.append(med[0] / med[1])
        print("whole run of %d steps, round %d: planned %.2f ms/step, uniform %.2f ms/step (%.2fx)"
              % (whole, r, 1e3 * med[0], 1e3 * med[1], ratios[-1]))
    print("whole run of %d steps: planned over uniform, median of %d alternating rounds: %.2fx"
          % (whole, rounds, statistics.median(ratios)))
PY
