#!/usr/bin/env bash
# Memory-scaling parallelism on one machine: ZeRO (moec --zero 1|2) and
# tensor parallelism (--tp) against replicated state, each rank's peak
# resident memory and step time, one rank per process under mpirun (the
# memory a process reports is its rank's), on moe16's shapes (d 256, 8
# heads, 4 MoE layers of 16 experts, about 26M parameters) with a global
# batch of BATCH (4) sequences of 256 on 2 ranks. Reported per config: each
# rank's growth of its resident set over its start (tensors, scratch and
# data), the compiler's buffer-plan prediction for it, the planner's
# (moe-plan-sharding on examples/clusters/local-cpu.json with the same
# degrees; it models ZeRO-1 as moments / replicas), and the median step
# time of ROUNDS (3) alternating rounds of STEPS (6) steps (the first 2
# left out). Not part of CI.
#   bench/memory.sh [BUILD_DIR]    env: BATCH (4), ROUNDS (3), STEPS (6)
set -euo pipefail
build=${1:-build}
batch=${BATCH:-4}
rounds=${ROUNDS:-3}
steps=${STEPS:-6}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# label:moec flags:planner degrees (dp ep tp) and ZeRO stage
configs=(
  "replicated:--ranks 2 --ep 1:2 1 1 0"
  "zero1:--ranks 2 --ep 1 --zero 1:2 1 1 1"
  "zero2:--ranks 2 --ep 1 --zero 2:2 1 1 2"
  "tp2:--ranks 2 --tp 2:1 1 2 0"
)
echo "== memory per rank: replicated, ZeRO-1, ZeRO-2, tp 2; moe16 shapes, batch $batch x 256, 2 ranks under mpirun, $rounds rounds"
"$py" - bench/models/moe16.json "$out/mem-moe16.json" "$batch" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "mem-moe16"
m["batch_size"] = int(sys.argv[3])
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
: > "$out/memory-plan.jsonl"
for c in "${configs[@]}"; do
  IFS=: read -r label flags degrees <<< "$c"
  read -r dp ep tp zero <<< "$degrees"
  # shellcheck disable=SC2086
  "$build/bin/moec" "$out/mem-moe16.json" $flags -o "$out/mem-$label" >/dev/null
  # The planner's figure is a column of the table, not a precondition: when
  # it finds no plan with these degrees the column says "-" and why goes to
  # stderr.
  rm -f "$out/mem-$label-plan.json"
  if ! "$build/bin/moec" "$out/mem-moe16.json" --cluster examples/clusters/local-cpu.json \
    --dp "$dp" --ep "$ep" --tp "$tp" --emit=plan -o "$out/mem-$label-plan.json" >/dev/null; then
    echo "note: no planner figure for $label (moe-plan-sharding above)" >&2
  fi
  "$py" - "$out/mem-$label-plan.json" "$label" "$zero" >> "$out/memory-plan.jsonl" <<'PY'
import json, sys
# The planner lists a ZeRO-1 variant only where it makes a grid fit: none
# for these; its ZeRO-1 model is the moments divided by the replicas.
try:
    c = [c for c in json.load(open(sys.argv[1]))["sharding"]["candidates"]
         if c["zero_stage"] == int(sys.argv[3])][0]
    print(json.dumps({"label": sys.argv[2], "planner_mb": c["max_memory_bytes"] / 1e6}))
except (OSError, ValueError, KeyError, IndexError):
    print(json.dumps({"label": sys.argv[2], "planner_mb": None}))
PY
done
: > "$out/memory.jsonl"
for r in $(seq "$rounds"); do
  for c in "${configs[@]}"; do
    IFS=: read -r label flags degrees <<< "$c"
    rm -f "$out/mem-$label.jsonl"
    mpiexec --oversubscribe -n 2 "$out/mem-$label" --data "$corpus" --steps "$steps" \
      --no-progress --threads 1 --metrics "$out/mem-$label.jsonl" > "$out/mem-$label.out"
    "$py" - "$out/mem-$label.jsonl" "$out/mem-$label.out" "$label" >> "$out/memory.jsonl" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step_seconds"] for r in rows if "step_seconds" in r][2:]
ranks = {}
for line in open(sys.argv[2]):
    m = re.match(r"rank (\d+) memory: peak resident [\d.]+ MB = [\d.]+ MB at start .* \+ "
                 r"([\d.]+) MB \([+-]?\d+% of the ([\d.]+) MB predicted", line)
    if m:
        ranks[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
print(json.dumps({"label": sys.argv[3], "steps": steps,
                  "grown_mb": [ranks[k][0] for k in sorted(ranks)],
                  "predicted_mb": [ranks[k][1] for k in sorted(ranks)]}))
PY
  done
done
"$py" - "$out/memory.jsonl" "$out/memory-plan.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
planner = {r["label"]: r["planner_mb"] for r in map(json.loads, open(sys.argv[2]))}
labels = list(dict.fromkeys(r["label"] for r in rows))
base = None
print("| config | rank memory growth (MB, median per rank) | buffer plan (MB) | planner (MB) | step (s, median) | memory vs replicated | step vs replicated |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for label in labels:
    mine = [r for r in rows if r["label"] == label]
    n = len(mine[0]["grown_mb"])
    grown = [statistics.median(r["grown_mb"][k] for r in mine) for k in range(n)]
    predicted = max(mine[0]["predicted_mb"])
    step = statistics.median(s for r in mine for s in r["steps"])
    if base is None:
        base = (max(grown), step)
    p = planner.get(label)
    print(f"| {label} | {', '.join(f'{g:.0f}' for g in grown)} | {predicted:.0f} | "
          f"{'-' if p is None else f'{p:.0f}'} | {step:.3f} | {max(grown) / base[0]:.2f}x | "
          f"{step / base[1]:.2f}x |")
PY
