#!/usr/bin/env bash
# The README's main job: compile the tiny example MoE model into a training
# binary with moec and train it on the King James Bible (Debian's
# bible-kjv), printing progress, the final validation loss and a text sample.
set -euo pipefail
build=${1:-build}
model=${2:-examples/models/tiny.json}
steps=${STEPS:-300}
corpus="$build/kjv.txt"

if [ ! -s "$corpus" ]; then
  echo "== extracting the corpus (King James Bible, from Debian's bible-kjv) to $corpus"
  bible -l80 'Gen1:1-Rev22:21' > "$corpus"
fi
entropy=$(python3 - "$corpus" <<'PY'
import collections, math, sys
data = open(sys.argv[1], "rb").read()
counts = collections.Counter(data)
print("%.3f" % -sum(c / len(data) * math.log(c / len(data)) for c in counts.values()))
PY
)
echo "corpus: $(wc -c < "$corpus") bytes; unigram entropy $entropy nats/byte (a model that ignores context)"

echo
echo "== moec: $model -> $build/tiny-train (frontend, training pipeline, Halide kernels, link)"
"$build/bin/moec" "$model" -o "$build/tiny-train" -v 2>&1 | grep -v '^moec: generating'

echo
echo "== training $steps steps (ranks: 1, threads: this machine)"
rm -rf "$build/tiny-ckpt" "$build/tiny-metrics.jsonl"
"$build/tiny-train" --data "$corpus" --steps "$steps" --eval-every 100 \
  --metrics "$build/tiny-metrics.jsonl" --checkpoint "$build/tiny-ckpt" \
  --sample 300 --prompt "And God said" --temperature 0.8

python3 - "$build/tiny-metrics.jsonl" "$entropy" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "loss" in r]
val = [r for r in rows if "val_loss" in r]
print()
print("training loss: first %.3f, last %.3f nats/byte" % (train[0]["loss"], train[-1]["loss"]))
print("final validation loss %.3f nats/byte on held-out text; unigram entropy %s"
      % (val[-1]["val_loss"], sys.argv[2]))
print("metrics: %s; checkpoint: %s (safetensors + JSON)" % (sys.argv[1], sys.argv[1].replace("tiny-metrics.jsonl", "tiny-ckpt")))
PY
