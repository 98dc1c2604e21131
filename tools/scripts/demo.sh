#!/usr/bin/env bash
# The README's main job, for now: import the tiny example model on this
# machine's cluster description, verify the IR, print it and summarise it.
set -euo pipefail
build=${1:-build}
model=${2:-examples/models/tiny.json}
cluster=${3:-examples/clusters/local-cpu.json}
out="$build/demo.mlir"

echo "== moe-translate: $model on $cluster"
"$build/bin/moe-translate" --import-model "$model" --cluster "$cluster" -o "$out"
echo "== moe-opt: parse and verify $out"
"$build/bin/moe-opt" "$out" -o "$out.verified"
cat "$out.verified"
echo
echo "== summary"
echo "parameters: $(grep -c '^ *moe.param ' "$out.verified")"
echo "ops in the step:"
grep -oE '= moe\.[a-z_]+' "$out.verified" | sed -E 's/= //' | sort | uniq -c | sort -rn | sed 's/^/  /'
echo "verified: yes (moe-opt checked every op's constraints)"
