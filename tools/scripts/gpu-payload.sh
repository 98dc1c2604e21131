#!/bin/bash
# Builds what tools/scripts/gpu-check.sh runs on a machine with an NVIDIA GPU
# but without this project's toolchain: CUDA training binaries (and their host
# twins) compiled by moec for a portable x86-64 CPU side, the CUDA kernel tests
# (cmake -DMOEC_CUDA_KERNEL_TESTS=ON), the shared libraries they load (LLVM's
# optional z3 and libxml2 replaced by stubs of the symbols libLLVM names), and
# the host binaries' losses computed here.
#
# usage: tools/scripts/gpu-payload.sh BUILD OUT   (OUT: a new directory)
set -euo pipefail
build=$(realpath "$1"); out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
host=x86-64-linux-avx-avx2-f16c-fma-sse41
mkdir -p "$out"/bin "$out"/ref "$out"/data
out=$(realpath "$out")
moec=$build/bin/moec
micro=$src/test/Driver/Inputs/micro.json
text=$src/test/Driver/Inputs/text.txt
cp "$text" "$out"/data/text.txt
[ -f "$build"/kjv.txt ] || { echo "gpu-payload.sh: $build/kjv.txt is missing (make demo fetches it)" >&2; exit 1; }
[ -x "$build"/test/codegen/MoEKernelTestsCUDA ] || {
  echo "gpu-payload.sh: build MoEKernelTestsCUDA first:" \
       "cmake -DMOEC_CUDA_KERNEL_TESTS=ON -DMOEC_CUDA_KERNEL_TESTS_HOST=$host $build &&" \
       "cmake --build $build --target MoEKernelTestsCUDA" >&2
  exit 1
}
head -c 2000000 "$build"/kjv.txt > "$out"/data/kjv.txt

# name | model | moec flags | run flags (the host twin runs here, the CUDA
# binary there, with the same flags)
configs=(
  "plain|$micro||--steps 20"
  "ckpt|$micro||--steps 6 --checkpoint ck --checkpoint-every 2"
  "sample|$micro||--steps 4 --sample 20"
  "ep2|$micro|--ranks 2|--steps 20 --ranks 2"
  "dp2|$micro|--ranks 2 --dp 2|--steps 20 --ranks 2"
  "dp2local|$micro|--ranks 2 --dp 2|--steps 20 --ranks 2 --local-steps 4"
  "dp2stale|$micro|--ranks 2 --dp 2|--steps 20 --ranks 2 --staleness 1"
  "blocking|$micro|--ranks 2 --dp 2 --schedule=blocking|--steps 20 --ranks 2"
  "zero2|$micro|--ranks 2 --dp 2 --zero 2|--steps 20 --ranks 2"
  "tp2|$src/test/Driver/Inputs/micro-tp.json|--ranks 2 --tp 2|--steps 20 --ranks 2"
  "int8|$micro|--ranks 2 --dp 2 --compress-grad int8|--steps 20 --ranks 2"
  "rebal|$micro|--ranks 2 --redundant-experts 2|--steps 30 --ranks 2 --rebalance-every 10"
  "dsv3|$src/test/Driver/Inputs/micro-deepseek.json|--ranks 2|--steps 20 --ranks 2"
  "tiny|$src/examples/models/tiny.json||--steps 20"
)
: > "$out"/configs.txt
declare -A built
for c in "${configs[@]}"; do
  IFS='|' read -r name model cflags rflags <<<"$c"
  key="$model $cflags"
  bin=${built[$key]:-}
  if [ -z "$bin" ]; then
    bin=$name
    built[$key]=$bin
    # shellcheck disable=SC2086
    "$moec" "$model" $cflags --host-target $host --target cuda -o "$out/bin/${bin}_cuda" >/dev/null
    # shellcheck disable=SC2086
    "$moec" "$model" $cflags --host-target $host -o "$out/bin/${bin}_host" >/dev/null
  fi
  data=data/text.txt
  [[ $name == tiny ]] && data=data/kjv.txt
  echo "$name|$bin|$data|$rflags" >> "$out"/configs.txt
  (cd "$out" && rm -rf ck && ./bin/${bin}_host --data $data --no-progress \
     --metrics ref/$name.jsonl $rflags > ref/$name.out 2>&1) || echo "host run $name failed"
  echo "built $name" >&2
done
rm -rf "$out"/ck
# The speed pair: the small example model, CUDA and host.
"$moec" "$src"/examples/models/small.json --host-target $host --target cuda -o "$out"/bin/small_cuda >/dev/null
"$moec" "$src"/examples/models/small.json --host-target $host -o "$out"/bin/small_host >/dev/null
# The contraction schedules under trial (codegen/generators/GpuSchedule.h),
# on the small model and bench/models/gpu-medium.json; and the OpenCL binary
# (NVIDIA's OpenCL driver where its ICD is installed).
for v in shared registers registers8; do
  for m in "$src"/examples/models/small.json "$src"/bench/models/gpu-medium.json; do
    MOEC_GPU_CONTRACTION=$v "$moec" "$m" --host-target $host --target cuda \
      -o "$out/bin/$(basename "$m" .json)_$v" >/dev/null
  done
done
"$moec" "$src"/examples/models/tiny.json --host-target $host --target opencl -o "$out"/bin/tiny_opencl >/dev/null
cp "$build"/test/codegen/MoEKernelTestsCUDA "$out"/bin/
cp "$src"/bench/torch_moe.py "$src"/examples/models/small.json "$src"/examples/models/tiny.json \
   "$src"/bench/models/gpu-medium.json "$out"/

# Shared libraries the binaries load that a CUDA machine may lack.
mkdir -p "$out"/lib/fallback
for l in $(ldd "$out"/bin/MoEKernelTestsCUDA "$out"/bin/tiny_cuda | awk '$3 ~ /^\// {print $3}' | sort -u); do
  case $(basename "$l") in
    libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|libresolv*|libstdc++*|libgcc_s*|ld-linux*) ;;
    libz3*|libxml2*|libicu*|liblzma*) ;; # stubbed below
    *) cp -L "$l" "$out"/lib/ ;;
  esac
done
cp -L "$(ldd "$out"/bin/tiny_cuda | awk '/libstdc\+\+/ {print $3}')" \
      "$(ldd "$out"/bin/tiny_cuda | awk '/libgcc_s/ {print $3}')" "$out"/lib/fallback/
llvm=$(ldd "$out"/bin/MoEKernelTestsCUDA | awk '/libLLVM/ {print $3}')
stub() { # stub LIB: the symbols libLLVM takes from LIB, with LIB's versions
  local lib=$1 real c=$out/stub.c map=$out/stub.map pairs=$out/stub.pairs
  real=$(ldd "$llvm" | awk -v l="$lib" '$1==l {print $3}')
  [ -n "$real" ] || return 0
  : > "$c"; : > "$pairs"
  objdump -T "$real" | grep -v '\*UND\*' | grep -E '^[0-9a-f]{16}' > "$out"/stub.defs
  for s in $(objdump -T "$llvm" | grep '\*UND\*' | awk '{print $NF}' | sort -u); do
    line=$(awk -v s="$s" '$NF==s' "$out"/stub.defs | head -1)
    [ -n "$line" ] || continue
    if grep -q ' DF ' <<<"$line"; then echo "void $s(void) { __builtin_trap(); }" >> "$c"
    else echo "void *$s[8];" >> "$c"; fi
    echo "$(awk '{print $(NF-1)}' <<<"$line") $s" >> "$pairs"
  done
  local flags=()
  if grep -qv '^Base ' "$pairs"; then
    : > "$map"; local prev=""
    for v in $(awk '{print $1}' "$pairs" | sort -uV); do
      echo "$v { global: $(awk -v v="$v" '$1==v {printf "%s; ", $2}' "$pairs") } $prev;" >> "$map"
      prev=$v
    done
    flags=(-Wl,--version-script="$map")
  fi
  cc -shared -fPIC -o "$out/lib/$lib" -Wl,-soname,"$lib" "${flags[@]}" -w "$c"
  rm -f "$c" "$map" "$pairs" "$out"/stub.defs
}
stub libz3.so.4
stub libxml2.so.2
(cd "$out" && rm -rf bin/*.build && tar cf - lib bin | xz -T2 -9 > payload.tar.xz && rm -rf lib bin)
cp "$src"/tools/scripts/gpu-check.sh "$out"/
du -sh "$out"
