#!/usr/bin/env bash
# The README's main job, for now: parse and verify an example MoE training
# step with moe-opt, print it, and summarise what it declares.
set -euo pipefail
build=${1:-build}
example=${2:-examples/mlir/tiny-moe.mlir}
opt="$build/bin/moe-opt"

echo "== moe-opt: parse, verify and print $example"
"$opt" "$example" -o "$build/demo.mlir"
cat "$build/demo.mlir"
echo
echo "== summary"
params=$(grep -c '^ *moe.param ' "$build/demo.mlir" || true)
ops=$(grep -oE '= moe\.[a-z_]+|^ *moe\.[a-z_]+' "$build/demo.mlir" | sed -E 's/.*moe\./moe./' | sort | uniq -c | sort -rn)
echo "parameters declared: $params"
echo "ops in the step:"
echo "$ops" | sed 's/^/  /'
echo "verified: yes (moe-opt checks every op's constraints before printing)"
