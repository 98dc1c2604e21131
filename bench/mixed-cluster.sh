#!/usr/bin/env bash
# A mixed cluster emulated on one machine: examples/clusters/local-cpu-mixed.json
# (this machine's preset and a kind at half its speed, one rank each), an
# expert-heavy model (the tiny example at width 128 with 8 experts of width
# 1024, OpenBLAS GEMMs so that experts compute routed rows only), STEPS
# steps (60) of the King James Bible with rank 1 computing at half speed
# (--emulate-cluster 1,0.5; one kernel thread per rank, as a device). Compared: the planner's plan for the cluster
# (moec --cluster: equal token shares, the runtime's constraint, and the
# faster rank holding more experts) against the uniform plan (--ranks 2
# --ep 2: half the experts each). Reported: the median step time over the
# steps after the 10th, their ratio, and the largest loss difference (the
# placement does not change what is computed). Part of `make bench`.
#   bench/mixed-cluster.sh [BUILD_DIR]    env: STEPS (60)
set -euo pipefail
build=${1:-build}
steps=${STEPS:-60}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo "== emulated mixed cluster: rank 1 at half speed, $steps steps"
"$py" - examples/models/tiny.json "$out/mx-model.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "mx-experts"
m["d_model"], m["ffn_dim"] = 128, 256
m["moe"].update({"num_experts": 8, "expert_ffn_dim": 1024, "num_shared_experts": 0})
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
"$build/bin/moec" "$out/mx-model.json" --cluster examples/clusters/local-cpu-mixed.json \
  --emit=plan -o "$out/mx-plan.json" 2>/dev/null
"$build/bin/moec" "$out/mx-model.json" --cluster examples/clusters/local-cpu-mixed.json \
  --gemm=blas -o "$out/mx-planned" >/dev/null
"$build/bin/moec" "$out/mx-model.json" --ranks 2 --ep 2 --gemm=blas -o "$out/mx-uniform" >/dev/null
for run in planned uniform; do
  rm -f "$out/mx-$run.jsonl"
  OPENBLAS_NUM_THREADS=1 "$out/mx-$run" --data "$corpus" --steps "$steps" --no-progress \
    --ranks 2 --threads 1 \
    --emulate-cluster 1,0.5 --metrics "$out/mx-$run.jsonl" >/dev/null
done
"$py" - "$out/mx-planned.jsonl" "$out/mx-uniform.jsonl" "$out/mx-planned.cpp" <<'PY'
import json, statistics, sys
runs = [[json.loads(l) for l in open(p) if '"loss"' in l] for p in sys.argv[1:3]]
med = [statistics.median(r["step_seconds"] for r in rows[10:]) for rows in runs]
diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(*runs))
print("planned (more experts on the fast rank) %.2f ms/step, uniform %.2f ms/step: %.2fx; "
      "max relative loss difference %.2g" % (1e3 * med[0], 1e3 * med[1], med[0] / med[1], diff))
PY
