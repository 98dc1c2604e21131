#!/bin/bash
# Runs on a machine with an NVIDIA GPU what tools/scripts/gpu-payload.sh
# built: the CUDA kernel tests, each training configuration's CUDA binary
# (losses compared with the host twin's, computed where the payload was
# built), and the speed pairs (CUDA against the host binary on every core,
# and against PyTorch on the same GPU where PyTorch is installed).
#
# usage: tools/scripts/gpu-check.sh PAYLOAD_DIR RESULTS_DIR
set -uo pipefail
p=$(realpath "$1"); r=$(mkdir -p "$2" && realpath "$2")
failures=0
w=$(mktemp -d); cd "$w" || exit 1
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
python3 - "$p"/ref "$r"/m <<'PY'
import json, os, sys
ref, got = sys.argv[1], sys.argv[2]
def losses(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            row = json.loads(line)
            if 'loss' in row and 'step' in row and 'tokens_per_s' in row:
                out[row['step']] = row['loss']
    return out
for f in sorted(os.listdir(ref)):
    if not f.endswith('.jsonl'):
        continue
    a, b = losses(os.path.join(got, f)), losses(os.path.join(ref, f))
    if not b or a.keys() != b.keys():
        print(f[:-6], 'steps', len(a), 'host', len(b), 'MISMATCH'); continue
    worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in b)
    print(f"{f[:-6]:10s} steps {len(a):3d}  worst rel loss diff {worst:.2e}  last {a[max(a)]:.4f}")
PY
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
python3 - "$r" <<'PY'
import json, os, sys
r = sys.argv[1]
def losses(f):
    path = os.path.join(r, f)
    if not os.path.exists(path):
        return None
    return [x['loss'] for x in map(json.loads, open(path)) if 'tokens_per_s' in x]
for m in ['small', 'gpu-medium']:
    a = losses('p_%s_shared.jsonl' % m)
    for v in ['registers', 'registers8']:
        b = losses('p_%s_%s.jsonl' % (m, v))
        print(m, v, 'no run' if a is None or b is None else
              'losses identical to shared' if a == b else 'losses DIFFER')
PY
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
