#!/bin/bash
# Builds a stand-in for what tools/scripts/gpu-payload.sh builds, for
# test/Tools/gpu-check.test: every binary is one shell script that ignores
# its flags and logs --steps N (default 3) training steps of a made-up loss
# curve to its --metrics file; and an nvidia-smi that names a GPU. So
# gpu-check.sh runs end to end in a second, without a GPU.
#
# Environment of the fake binaries, to make a run go wrong: a binary whose
# name ends in _cuda multiplies its losses by 1 + FAKE_CUDA_LOSS_SHIFT and
# leaves out step FAKE_CUDA_SKIP_STEP.
#
# usage: fake-gpu-payload.sh OUT   (OUT/payload: the payload; OUT/path: nvidia-smi)
set -euo pipefail
out=$1
rm -rf "$out" && mkdir -p "$out"/payload/ref "$out"/payload/data "$out"/path "$out"/tree/bin "$out"/tree/lib
cat > "$out"/path/nvidia-smi <<'SH'
#!/bin/sh
echo "Fake GPU, 0.0, 1 MiB"
SH
cat > "$out"/tree/bin/fake <<'SH'
#!/bin/sh
# A stand-in for a training binary: logs a made-up loss curve.
metrics="" steps=3 name=$(basename "$0")
while [ $# -gt 0 ]; do
  case $1 in
    --metrics) metrics=$2; shift ;;
    --steps) steps=$2; shift ;;
    --help) exit 0 ;;
  esac
  shift
done
case $name in
  *_cuda) shift_=${FAKE_CUDA_LOSS_SHIFT:-0} skip=${FAKE_CUDA_SKIP_STEP:-0} ;;
  *) shift_=0 skip=0 ;;
esac
case $name in
  MoEKernelTestsCUDA) echo "[  PASSED  ] 1 test."; exit 0 ;;
esac
[ -n "$metrics" ] || exit 0
awk -v n="$steps" -v s="$shift_" -v skip="$skip" 'BEGIN {
  for (i = 1; i <= n; ++i)
    if (i != skip)
      printf "{\"step\":%d,\"loss\":%.9f,\"tokens_per_s\":1000}\n", i, 5.5 / (1 + 0.01 * i) * (1 + s)
}' > "$metrics"
SH
chmod +x "$out"/path/nvidia-smi "$out"/tree/bin/fake
for b in plain_cuda plain_host ep2_cuda ep2_host tiny_cuda tiny_host small_cuda small_host \
         small_shared small_registers small_registers8 gpu-medium_shared gpu-medium_registers \
         gpu-medium_registers8 tiny_opencl MoEKernelTestsCUDA; do
  ln -s fake "$out"/tree/bin/$b
done
tar cf - -C "$out"/tree bin lib | xz -1 > "$out"/payload/payload.tar.xz
printf 'plain|plain|data/text.txt|--steps 4\nep2|ep2|data/text.txt|--steps 4 --ranks 2\n' \
  > "$out"/payload/configs.txt
echo "text" > "$out"/payload/data/text.txt
echo "text" > "$out"/payload/data/kjv.txt
# The host twins' losses, as gpu-payload.sh computes them.
for c in plain ep2; do
  "$out"/tree/bin/plain_host --steps 4 --metrics "$out"/payload/ref/$c.jsonl
done
