#!/usr/bin/env bash
# The README's main job, for now: import the tiny example model on this
# machine's cluster description, verify the forward step, compile it into a
# training step (fused gating, backward, AdamW, kernels, memory plan) and
# summarise both.
set -euo pipefail
build=${1:-build}
model=${2:-examples/models/tiny.json}
cluster=${3:-examples/clusters/local-cpu.json}
out="$build/demo.mlir"

echo "== moe-translate: $model on $cluster"
"$build/bin/moe-translate" --import-model "$model" --cluster "$cluster" -o "$out"
echo "== moe-opt: parse and verify the forward step ($out)"
"$build/bin/moe-opt" "$out" -o "$out.verified"
echo "parameters: $(grep -c '^ *moe.param ' "$out.verified")"
echo "ops in the forward step:"
grep -oE '= moe\.[a-z_]+' "$out.verified" | sed -E 's/= //' | sort | uniq -c | sort -rn | sed 's/^/  /'

echo
echo "== moe-opt --moe-train-pipeline: fused gating, backward, AdamW, kernels"
start=$(date +%s%N)
"$build/bin/moe-opt" --moe-train-pipeline "$out" -o "$out.train"
end=$(date +%s%N)
echo "compiled in $(( (end - start) / 1000000 )) ms -> $out.train"
echo "kernels (one generated kernel each):"
grep -oE 'moe.kernel @[a-z_0-9]+ family "[a-z_]+"' "$out.train" | sed -E 's/.*family "([a-z_]+)"/\1/' | sort | uniq -c | sort -rn | sed 's/^/  /'
plan=$(grep -oE 'moe.buffer_plan = \{[^}]*\}' "$out.train")
echo "memory plan (bytes):"
echo "$plan" | grep -oE '[a-z_]+ = [0-9]+' | sed 's/^/  /'
echo "verified: yes (moe-opt checked every op of both steps)"
