#!/usr/bin/env bash
# `make bench`: MoEC against OpenBLAS and PyTorch, side by side in one run,
# medians. Writes bench/results/*.json (under the build dir) and prints a
# table. Not part of the test suite.
#   bench/run.sh [BUILD_DIR]    env: THREADS (default: all cores), ROUNDS (3),
#                               STEPS (training steps per round, default 12)
set -euo pipefail
build=${1:-build}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-3}
steps=${STEPS:-12}
py=/usr/bin/python3 # Debian's python, where python3-torch lives
out="$build/bench"
mkdir -p "$out"

cmake --build "$build" --target moe-bench-ffn moe-bench-comm >/dev/null

echo "== planner: DeepSeek-V3 (4096 tokens) on 2048 H100 (import excluded; pipeline + moe-plan-sharding)"
"$build/bin/moe-translate" --import-hf-config examples/models/hf/deepseek-v3.json --seq-len 4096 \
  --batch-size 1 --cluster examples/clusters/h100-2048.json -o "$out/dsv3.mlir" 2>/dev/null
"$py" - "$build/bin/moe-opt" "$out/dsv3.mlir" "$out/dsv3-plan.txt" <<'PY'
import statistics, subprocess, sys, time
times = []
for _ in range(3):
    start = time.perf_counter()
    subprocess.run([sys.argv[1], sys.argv[2], "--moe-train-pipeline=lower=false",
                    "--moe-plan-sharding=report-table=" + sys.argv[3], "-o", "/dev/null"], check=True)
    times.append(time.perf_counter() - start)
print("median %.2f s over 3 runs; %s" % (statistics.median(times),
      [l for l in open(sys.argv[3]) if l.startswith("chosen")][0].strip()))
PY
echo
echo "== grouped expert FFN (SwiGLU, forward + backward) vs OpenBLAS sgemm, $threads threads"
"$build/bin/moe-bench-ffn" "$threads" 15 | tee "$out/ffn.json"

corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo
THREADS="$threads" ROUNDS="$rounds" STEPS="$steps" bench/vs-torch.sh "$build"
echo
echo "== the thread communicator (the local-cpu preset's shared-memory link)"
"$build/bin/moe-bench-comm"
bench/ranks.sh "$build"
bench/plan-ranking.sh "$build"
bench/compression.sh "$build"
bench/load-balance.sh "$build"
bench/rebalance.sh "$build"
bench/mixed-cluster.sh "$build"
bench/local-steps.sh "$build"
echo
bench/mixed-precision.sh "$build"
