#!/usr/bin/env bash
# Builds the frontend fuzzer with clang's libFuzzer, ASan and UBSan, and runs
# it for a bounded time over a corpus seeded with every example and test
# input. Prints the executions and crashes; fails on any crash.
#   test/fuzz/run-fuzz.sh SECONDS BUILD_DIR
set -euo pipefail
seconds=${1:-60}
build=${2:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
out="$build/fuzz"
mkdir -p "$out/corpus" "$out/crashes"

cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "run-fuzz: clang++ not found (tools/scripts/install-deps.sh installs clang-14)" >&2
  exit 1
fi
launcher=$(command -v ccache || true)
flags="-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$src/frontend/include -I$src/runtime/include"
if [ ! -x "$out/frontend-fuzzer" ] || [ -n "$(find "$src/frontend" "$src/runtime" "$src/test/fuzz" -newer "$out/frontend-fuzzer" -name '*.cpp' -o -newer "$out/frontend-fuzzer" -name '*.h' | head -n1)" ]; then
  objs=()
  for f in "$src"/frontend/lib/{Diagnostics,JsonDoc,ObjectReader,ModelJson,ModelSpec,HFConfig,ClusterJson,DevicePresets}.cpp "$src/runtime/lib/Checkpoint.cpp" "$src/test/fuzz/FrontendFuzzer.cpp"; do
    o="$out/$(basename "$f" .cpp).o"
    $launcher "$cxx" $flags -c "$f" -o "$o" &
    objs+=("$o")
  done
  wait
  "$cxx" $flags "${objs[@]}" -o "$out/frontend-fuzzer"
fi

# Seeds: every JSON input the project ships or tests, and a checkpoint.
find "$src/examples" "$src/test" -name '*.json' -exec cp {} "$out/corpus/" \;
cp "$src"/test/fuzz/seeds/* "$out/corpus/"

set +e
"$out/frontend-fuzzer" "$out/corpus" -dict="$src/test/fuzz/json.dict" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -artifact_prefix="$out/crashes/" -print_final_stats=1 >"$out/fuzz.log" 2>&1
rc=$?
set -e
runs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$out/fuzz.log" | grep -oE '[0-9]+$' || echo 0)
crashes=$(find "$out/crashes" -type f | wc -l)
echo "run-fuzz: $runs executions in ${seconds}s, $crashes crashes (log: $out/fuzz.log)"
if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
  tail -n 40 "$out/fuzz.log" >&2
  exit 1
fi
