#!/usr/bin/env bash
# The README's worked example of pretrained weights in and out: a published
# MoE architecture (Qwen3-MoE-30B-A3B's config.json, examples/models/hf/),
# shrunk; a SentencePiece tokenizer trained on the corpus; a base checkpoint
# in HuggingFace's format (trained here on the Old Testament, since nothing
# can be downloaded: with a published checkpoint, start at step 4); then
# fine-tuning it on the New Testament from those weights, evaluation of both
# on held-out New Testament text, a sample, and the export of the result in
# HuggingFace's format.
#
#   tools/scripts/hf-example.sh [BUILD_DIR [OUT_DIR]]   (make hf-example)
#
# Everything is written to OUT_DIR (BUILD_DIR/hf-example). BASE_STEPS and
# TUNE_STEPS set the two runs' lengths (300 and 150).
set -euo pipefail
build=${1:-build}
out=${2:-$build/hf-example}
base_steps=${BASE_STEPS:-300}
tune_steps=${TUNE_STEPS:-150}
bin="$build/bin"
examples="$(cd "$(dirname "$0")/../.." && pwd)/examples"
# Only a folder this script made (its marker inside) is emptied first.
if [ -e "$out" ] && [ ! -e "$out/.hf-example" ]; then
  echo "hf-example.sh: $out exists and was not made by this script; give another OUT_DIR" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out"
touch "$out/.hf-example"

echo "== corpora (Debian's bible-kjv): the Old Testament to pretrain, the New to fine-tune"
bible -l80 'Gen1:1-Mal4:6' > "$out/old.txt"
bible -l80 'Mat1:1-Rev22:21' > "$out/new-all.txt"
# The last tenth of the New Testament is held out for evaluation.
lines=$(wc -l < "$out/new-all.txt")
head -n $((lines * 9 / 10)) "$out/new-all.txt" > "$out/new.txt"
tail -n +$((lines * 9 / 10 + 1)) "$out/new-all.txt" > "$out/new-heldout.txt"

echo
echo "== 1. a SentencePiece tokenizer (BPE, 2000 pieces) trained on both (spm_train)"
cat "$out/old.txt" "$out/new.txt" > "$out/both.txt"
spm_train --input="$out/both.txt" --model_prefix="$out/sp" --vocab_size=2000 \
  --model_type=bpe --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --byte_fallback=true \
  --character_coverage=1.0 --minloglevel=2
for part in old new new-heldout; do
  "$bin/moe-tokenize" --model "$out/sp.model" "$out/$part.txt" -o "$out/$part.bin"
done

echo
echo "== 2. Qwen3-MoE's architecture, shrunk (moec --hf ... --override)"
shrink=num_hidden_layers=2,hidden_size=128,num_attention_heads=4,num_key_value_heads=2,head_dim=32
shrink+=,num_experts=8,num_experts_per_tok=2,moe_intermediate_size=128,vocab_size=2000
"$bin/moec" --hf "$examples/models/hf/qwen3-moe.json" --override "$shrink" \
  --seq-len 128 --batch-size 16 -o "$out/qwen3-small"

echo
echo "== 3. the base checkpoint: $base_steps steps on the Old Testament, exported in HF format"
"$out/qwen3-small" --data "$out/old.bin" --steps "$base_steps" --lr 0.003 --warmup-steps 20 \
  --total-steps "$base_steps" --eval-every 100 --export-hf "$out/base" --no-progress |
  grep -E "^step .*(00/|validation)|exported"

echo
echo "== 4. fine-tuning from the HF weights: $tune_steps steps on the New Testament"
"$out/qwen3-small" --init-hf "$out/base" --data "$out/new.bin" --steps "$tune_steps" \
  --lr 0.001 --warmup-steps 10 --total-steps "$tune_steps" --no-progress \
  --tokenizer "$out/sp.model" --sample 40 --prompt "And Jesus said" --temperature 0.7 \
  --export-hf "$out/finetuned" | grep -Ev "^step +[0-9]+/[0-9]+ .*tok/s" | grep -v "^memory"

echo
echo "== 5. evaluation on held-out New Testament text (mean next-token loss, nats/token)"
"$out/qwen3-small" --init-hf "$out/base" --eval-only --data "$out/new-heldout.bin" \
  --metrics "$out/base-eval.jsonl" | grep eval_loss | sed 's/^/base:       /'
"$out/qwen3-small" --init-hf "$out/finetuned" --eval-only --data "$out/new-heldout.bin" \
  --metrics "$out/tuned-eval.jsonl" | grep eval_loss | sed 's/^/fine-tuned: /'
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
base, tuned = [[json.loads(l) for l in open(os.path.join(out, f)) if "eval_loss" in l][-1]["eval_loss"]
               for f in ("base-eval.jsonl", "tuned-eval.jsonl")]
config = json.load(open(os.path.join(out, "finetuned", "config.json")))
print()
print("held-out loss: base %.3f -> fine-tuned %.3f nats/token" % (base, tuned))
print("HuggingFace model (%s, %s): %s/finetuned (config.json + model.safetensors)"
      % (config["model_type"], config["torch_dtype"], out))
PY
