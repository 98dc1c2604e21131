#!/bin/bash
# Runs on a machine with an NVIDIA GPU what tools/scripts/gpu-payload.sh
# built: the CUDA kernel tests, each training configuration's CUDA binary
# (losses compared with the host twin's, computed where the payload was
# built), and the speed pairs (CUDA against the host binary on every core,
# and against PyTorch on the same GPU where PyTorch is installed).
#
# Exits 1 when anything failed: a training run, a loss beyond the tolerance
# of tools/scripts/compare-gpu-losses.py (or missing steps), schedules whose
# losses are not identical, or a kernel test; the speeds are only printed.
#
# usage: tools/scripts/gpu-check.sh PAYLOAD_DIR RESULTS_DIR
set -uo pipefail
here=$(dirname "$(realpath "$0")")
p=$(realpath "$1"); r=$(mkdir -p "$2" && realpath "$2")
failures=0
w=$(mktemp -d); cd "$w" || exit 1
trap 'rm -rf "$w"' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$r"/gpu.txt
grep -m1 "model name" /proc/cpuinfo | tee -a "$r"/gpu.txt; nproc | tee -a "$r"/gpu.txt
xz -dc "$p"/payload.tar.xz | tar xf - || { echo "cannot unpack the payload"; exit 1; }
cp -r "$p"/data "$p"/*.json "$p"/*.py . 2>/dev/null
export LD_LIBRARY_PATH=$w/lib
if ! ./bin/tiny_host --help >/dev/null 2>"$r"/loader.txt; then
  export LD_LIBRARY_PATH=$w/lib:$w/lib/fallback
  ./bin/tiny_host --help >/dev/null 2>>"$r"/loader.txt || { cat "$r"/loader.txt; exit 1; }
fi
echo "== training, CUDA against the host binary"
mkdir -p "$r"/m
while IFS='|' read -r name bin data flags; do
  rm -rf ck
  # shellcheck disable=SC2086
  timeout 120 ./bin/${bin}_cuda --data $data --no-progress --metrics "$r"/m/$name.jsonl $flags \
    > "$r"/m/$name.out 2>&1 || { echo "$name: rc $? $(tail -2 "$r"/m/$name.out)"; failures=$((failures + 1)); }
done < "$p"/configs.txt
# Every run's losses against its host twin's: a missing run, missing steps
# or a difference beyond the tolerance counts as a failure.
python3 "$here"/compare-gpu-losses.py "$p"/ref "$r"/m
failures=$((failures + $?))
echo "== speed"
speed() { # name binary flags...
  local name=$1 bin=$2; shift 2
  rm -f "$r"/s_$name.jsonl
  timeout 150 ./bin/$bin --no-progress --metrics "$r"/s_$name.jsonl "$@" > "$r"/s_$name.out 2>&1 \
    || echo "$name: rc $? $(tail -2 "$r"/s_$name.out)"
  python3 - "$r"/s_$name.jsonl "$name" <<'PY'
import json, statistics, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if 'tokens_per_s' in l]
except OSError:
    rows = []
rows = [r for r in rows if 'tokens_per_s' in r][3:]
if rows:
    print(f"{sys.argv[2]:12s} median tokens/s {statistics.median(r['tokens_per_s'] for r in rows):10.0f}"
          f"  last loss {rows[-1]['loss']:.4f}  steps {len(rows)}")
PY
}
speed tiny_cuda tiny_cuda --data data/kjv.txt --steps 60
speed tiny_host tiny_host --data data/kjv.txt --steps 60 --threads "$(nproc)"
speed small_cuda small_cuda --data data/kjv.txt --steps 25 --trace "$r"/small_cuda_trace.json
speed small_host small_host --data data/kjv.txt --steps 12 --threads "$(nproc)"
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  for m in tiny small; do
    timeout 120 python3 torch_moe.py $m.json 20 "$(nproc)" --data data/kjv.txt --device cuda \
      2>&1 | tail -1 | tee -a "$r"/torch.txt
  done
fi
echo "== contraction schedules, profiled (--profile-kernels)"
for m in small gpu-medium; do
  for v in shared registers registers8; do
    steps=12; [ $m = gpu-medium ] && steps=6
    echo "-- ${m}_$v"
    timeout 100 ./bin/${m}_$v --data data/kjv.txt --steps $steps --no-progress --profile-kernels \
      --metrics "$r"/p_${m}_$v.jsonl 2>&1 | grep -A8 "kernel profile"
  done
done
# The schedules sum in the same order: the same losses, bit for bit.
for m in small gpu-medium; do
  for v in registers registers8; do
    python3 "$here"/compare-gpu-losses.py --tol 0 "$r"/p_${m}_shared.jsonl "$r"/p_${m}_$v.jsonl
    failures=$((failures + $?))
  done
done
echo "== tiny, OpenCL (NVIDIA's driver where its ICD is installed, else the first platform)"
if [ ! -e /etc/OpenCL/vendors/nvidia.icd ] && ldconfig -p | grep -q libnvidia-opencl.so.1; then
  mkdir -p "$w"/icd && echo libnvidia-opencl.so.1 > "$w"/icd/nvidia.icd
  export OCL_ICD_VENDORS=$w/icd
fi
timeout 100 ./bin/tiny_opencl --data data/kjv.txt --steps 20 --no-progress \
  --metrics "$r"/tiny_opencl.jsonl 2>&1 | tail -3
echo "== kernel tests"
timeout 240 ./bin/MoEKernelTestsCUDA --gtest_output=json:"$r"/kernels.json > "$r"/kernels.txt 2>&1
rc=$?; echo "rc $rc"; [ $rc = 0 ] || failures=$((failures + 1)); grep -E "^\[  (PASSED|FAILED) |tests ran|FAILED TEST" "$r"/kernels.txt | head -30
tar cf "$r"/m.tar -C "$r" m && rm -rf "$r"/m
echo "failures: $failures"
exit $((failures > 0))
