#!/usr/bin/env bash
# The project's libFuzzer targets, one per reader of user input (see
# docs/Fuzzing.md): model, hf, cluster, checkpoint, tokens, mlir, driver.
#   test/fuzz/run-fuzz.sh build BUILD_DIR            # builds them all
#   test/fuzz/run-fuzz.sh NAME SECONDS BUILD_DIR     # a bounded run
#   test/fuzz/run-fuzz.sh NAME runs=N BUILD_DIR      # N executions (long runs)
# A run first replays the regression inputs under test/fuzz/regressions/NAME
# (each a crash once found), then fuzzes from a corpus seeded with every
# example and test input of its kind, the error tests' malformed ones
# included, with a fixed seed (MOEC_FUZZ_SEED, default 1). Prints executions and findings; fails
# on any crash, sanitizer report, leak, timeout or broken contract.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)

cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "run-fuzz: clang++ not found (tools/scripts/install-deps.sh installs clang-14)" >&2
  exit 1
fi

if [ "$1" = build ]; then
  build=$(cd "$2" && pwd)
  # ccache when installed (install-deps.sh installs it); without it the
  # objects are compiled directly, nothing is skipped.
  make -s -f "$src/test/fuzz/Fuzzers.mk" SRC="$src" BUILD="$build" CXX="$cxx" \
    CCACHE="$(command -v ccache || true)" -j"$(nproc)" all
  exit 0
fi

name=$1 budget=$2 build=$(cd "$3" && pwd)
out="$build/fuzz/$name"
fuzzer="$build/fuzz/$name-fuzzer"
[ -x "$fuzzer" ] || { echo "run-fuzz: $fuzzer missing (run-fuzz.sh build first)" >&2; exit 1; }
rm -rf "$out/crashes"
mkdir -p "$out/corpus" "$out/crashes"

# Seeds and dictionary per reader.
dict=()
maxlen=8192
json_seeds() {
  find "$src/examples" "$src/test" -name '*.json' -exec cp {} "$out/corpus/" \;
  # The malformed inputs of the error tests (split-file sections).
  for t in "$src"/test/Frontend/*.test; do
    awk -v base="$out/corpus/$(basename "$t" .test)-" \
      '/^#--- / {out = ($2 ~ /\.json$/) ? base $2 : ""; next} out != "" {print > out}' "$t"
  done
  dict=(-dict="$src/test/fuzz/json.dict")
}
case $name in
  model | hf | cluster | driver) json_seeds ;;
  checkpoint)
    cp "$src"/test/fuzz/seeds/checkpoint/* "$out/corpus/"
    dict=(-dict="$src/test/fuzz/checkpoint.dict") ;;
  tokens) cp "$src"/test/fuzz/seeds/tokens/* "$out/corpus/" ;;
  mlir)
    # Every IR file the tests hold, split at "// -----" as the tests are.
    i=0
    while IFS= read -r f; do
      awk -v base="$out/corpus/seed$i" '/^\/\/ -----/ {n++; next} {print > (base "-" n+0 ".mlir")}' "$f"
      i=$((i + 1))
    done < <(find "$src/test" "$src/examples" -name '*.mlir')
    { cat "$src/test/fuzz/mlir.dict.in"
      grep -ho 'Op<"[a-z_0-9]*"' "$src"/dialect/include/moe/Dialect/MoE/*.td | sed 's/Op<"\(.*\)"/"moe.\1"/' | sort -u
    } >"$out/mlir.dict"
    dict=(-dict="$out/mlir.dict")
    maxlen=32768 ;;
  *) echo "run-fuzz: unknown fuzzer '$name'" >&2; exit 1 ;;
esac

# Regressions: each once found a crash; now each must run clean.
shopt -s nullglob
regressions=("$src/test/fuzz/regressions/$name"/*)
shopt -u nullglob
if [ ${#regressions[@]} -gt 0 ]; then
  if ! "$fuzzer" "${regressions[@]}" >"$out/regressions.log" 2>&1; then
    tail -n 40 "$out/regressions.log" >&2
    echo "run-fuzz: $name: a regression input fails again (log: $out/regressions.log)" >&2
    exit 1
  fi
fi

case $budget in
  runs=*) limit=(-runs="${budget#runs=}") ;;
  *) limit=(-max_total_time="$budget") ;;
esac
set +e
# A fixed seed: a run of N executions is reproducible (MOEC_FUZZ_SEED=0 picks one).
ASAN_OPTIONS=detect_leaks=1 "$fuzzer" "$out/corpus" "${dict[@]}" "${limit[@]}" -timeout=10 \
  -seed="${MOEC_FUZZ_SEED:-1}" \
  -rss_limit_mb=2048 -max_len=$maxlen -artifact_prefix="$out/crashes/" -print_final_stats=1 \
  >"$out/fuzz.log" 2>&1
rc=$?
set -e
runs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$out/fuzz.log" | grep -oE '[0-9]+$' || echo 0)
crashes=$(find "$out/crashes" -type f | wc -l)
echo "run-fuzz: $name: $runs executions, $crashes findings, ${#regressions[@]} regression inputs (log: $out/fuzz.log)"
if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
  tail -n 40 "$out/fuzz.log" >&2
  exit 1
fi
