#!/usr/bin/env bash
# ZeRO (moec --zero 1|2) against replicated optimiser state: each rank's
# peak resident memory and step time, one rank per process under mpirun
# (the memory a process reports is its rank's), on moe16's shapes (d 256,
# 4 MoE layers of 16 experts, about 26M parameters) with a global batch of
# BATCH (4) sequences of 256, RANKS (2) ranks of data parallelism. Reported
# per stage: each rank's growth of its resident set over its start (the
# tensors, scratch and data), the buffer plan's prediction for it, and the
# median step time of ROUNDS (3) alternating rounds of STEPS (6) steps (the
# first 2 left out). Not part of CI.
#   bench/zero.sh [BUILD_DIR]    env: RANKS (2), BATCH (4), ROUNDS (3), STEPS (6), EP (1)
set -euo pipefail
build=${1:-build}
ranks=${RANKS:-2}
batch=${BATCH:-4}
rounds=${ROUNDS:-3}
steps=${STEPS:-6}
ep=${EP:-1}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== ZeRO vs replicated AdamW state: moe16 shapes, batch $batch x 256, $ranks ranks (ep $ep) under mpirun, $rounds rounds"
"$py" - bench/models/moe16.json "$out/zero-moe16.json" "$batch" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "zero-moe16"
m["batch_size"] = int(sys.argv[3])
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
for stage in 0 1 2; do
  "$build/bin/moec" "$out/zero-moe16.json" --ranks "$ranks" --ep "$ep" --zero "$stage" \
    -o "$out/zero-$stage" >/dev/null
done
: > "$out/zero.jsonl"
for r in $(seq "$rounds"); do
  for stage in 0 1 2; do
    rm -f "$out/zero-$stage.jsonl"
    mpiexec --oversubscribe -n "$ranks" "$out/zero-$stage" --data "$corpus" --steps "$steps" \
      --no-progress --threads 1 --metrics "$out/zero-$stage.jsonl" > "$out/zero-$stage.out"
    "$py" - "$out/zero-$stage.jsonl" "$out/zero-$stage.out" "$stage" >> "$out/zero.jsonl" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step_seconds"] for r in rows if "step_seconds" in r][2:]
ranks = {}
for line in open(sys.argv[2]):
    m = re.match(r"rank (\d+) memory: peak resident [\d.]+ MB = [\d.]+ MB at start .* \+ "
                 r"([\d.]+) MB \([+-]?\d+% of the ([\d.]+) MB predicted", line)
    if m:
        ranks[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
print(json.dumps({"stage": int(sys.argv[3]), "steps": steps,
                  "grown_mb": [ranks[k][0] for k in sorted(ranks)],
                  "predicted_mb": [ranks[k][1] for k in sorted(ranks)]}))
PY
  done
done
"$py" - "$out/zero.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = None
print("| ZeRO stage | rank memory growth (MB, median per rank) | predicted (MB) | step (s, median) | memory vs stage 0 | step vs stage 0 |")
print("| --- | --- | --- | ---: | ---: | ---: |")
for stage in (0, 1, 2):
    mine = [r for r in rows if r["stage"] == stage]
    n = len(mine[0]["grown_mb"])
    grown = [statistics.median(r["grown_mb"][k] for r in mine) for k in range(n)]
    predicted = mine[0]["predicted_mb"]
    step = statistics.median(s for r in mine for s in r["steps"])
    if base is None:
        base = (max(grown), step)
    print(f"| {stage} | {', '.join(f'{g:.0f}' for g in grown)} | {', '.join(f'{p:.0f}' for p in predicted)} "
          f"| {step:.3f} | {max(grown) / base[0]:.2f}x | {step / base[1]:.2f}x |")
PY
