#!/usr/bin/env bash
# The sanitizer jobs of CI: the runtime (plain C++: data, checkpoints,
# codecs, scratch pool, the thread and MPI communicators) built with
# AddressSanitizer + UndefinedBehaviorSanitizer and with ThreadSanitizer, its
# unit tests run under each; then the trainer (runtime/lib/Trainer*.cpp:
# thread ranks, rebalancing, staleness, local steps, checkpoints) under each,
# through a partitioned training binary whose step program the default
# build's moec emits (`make test` builds it first) and which this job
# compiles and links against its own sanitized runtime. Any report fails
# the job.
#   tools/scripts/sanitize.sh            # both
#   tools/scripts/sanitize.sh asan|tsan  # one
set -euo pipefail
cd "$(dirname "$0")/../.."
./tools/scripts/install-deps.sh >/dev/null
jobs=${*:-asan tsan}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
# Halide's runtime (linked into training binaries, not instrumented) hands
# its thread pool's work over through its own atomics, which ThreadSanitizer
# does not see: tools/scripts/tsan-suppressions.txt names those frames only.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/scripts/tsan-suppressions.txt"
moec=build/bin/moec
trainer_dir=build/sanitize-trainer
if [ -x "$moec" ]; then
  rm -rf "$trainer_dir" && mkdir -p "$trainer_dir"
  # The micro model with 8 experts and no auxiliary loss (a skewed load,
  # so the rebalancer moves experts) on 2 data replicas x 2 expert ranks:
  # dp all-reduces (delayed gradients, local steps) and ep all-to-alls.
  sed -e 's/"num_experts": 4/"num_experts": 8/' -e 's/"aux_loss_coef": [0-9.e-]*/"aux_loss_coef": 0/' \
    test/Driver/Inputs/micro.json > "$trainer_dir/skewed.json"
  "$moec" "$trainer_dir/skewed.json" --ranks 4 --ep 2 -o "$trainer_dir/dp2ep2" >/dev/null
fi
# trainer JOB: the binary above against build-JOB's runtime, trained with
# each run-time component on, 4 thread ranks.
trainer() {
  local job=$1 flags src="$trainer_dir/dp2ep2.build" dir="$trainer_dir/$1"
  flags=$(sed -n 's/^MOEC_SANITIZE:STRING=//p' "build-$job/CMakeCache.txt")
  cmake --build "build-$job" --target moert_main MoEFrontendSpec
  rm -rf "$dir" && mkdir -p "$dir"
  c++ -O1 -g -std=c++20 -fsanitize="$flags" -fno-omit-frame-pointer -fno-sanitize-recover=all \
    -I"$src/kernels" -Iruntime/include -Icontract/include -I/usr/include/halide14 "$src"/*.cpp "$src"/kernels/*.a \
    "build-$job/runtime/libmoert_main.a" "build-$job/frontend/libMoEFrontendSpec.a" \
    "build-$job/runtime/libmoert.a" \
    "build-$job/runtime/libmoert_cpu.a" -lopenblas -lsentencepiece -lpthread -ldl -o "$dir/train"
  local train=("$dir/train" --data test/Driver/Inputs/text.txt --ranks 4 --no-progress)
  export OPENBLAS_NUM_THREADS=1
  echo "sanitize: $job trainer: rebalancing, evaluation, trace, checkpoint, resume with sampling"
  "${train[@]}" --steps 40 --rebalance-every 10 --eval-every 20 --trace "$dir/trace.json" \
    --metrics "$dir/m.jsonl" --checkpoint "$dir/ckpt" > "$dir/rebalance.log"
  grep -q 'moved [0-9]* experts between ranks' "$dir/rebalance.log" ||
    { echo "sanitize: no expert moved: the migration was not exercised" >&2; exit 1; }
  "${train[@]}" --steps 44 --checkpoint "$dir/ckpt" --resume --sample 16 >/dev/null
  echo "sanitize: $job trainer: delayed gradients over emulated links and devices"
  "${train[@]}" --steps 8 --staleness 1 --sync-steps 2 --emulate-link 5,10 \
    --emulate-cluster 1,0.5,1,1 >/dev/null
  echo "sanitize: $job trainer: local steps, a compressed outer all-reduce, replicas' files"
  "${train[@]}" --steps 8 --local-steps 4 --outer-codec int8 --save-replicas "$dir/replicas" \
    --checkpoint "$dir/local" --checkpoint-every 4 >/dev/null
}
for job in $jobs; do
  echo "sanitize: $job"
  cmake --preset "$job" >/dev/null
  cmake --build "build-$job" --target MoERuntimeTests
  ctest --test-dir "build-$job" -R 'RuntimeTest|CommTest|CodecTest' --output-on-failure -j2
  # The MPI communicator under ASan + UBSan too (ThreadSanitizer does not
  # follow OpenMPI's own threads). Leak checking is off for these only:
  # OpenMPI's components are unloaded before exit, so their by-design
  # allocations cannot be attributed or suppressed; our own code's leaks are
  # checked by the thread-communicator tests above.
  if [ "$job" = asan ] && grep -q '^MPIEXEC_EXECUTABLE:FILEPATH=/' "build-$job/CMakeCache.txt"; then
    cmake --build "build-$job" --target MoEMpiCommTest
    ASAN_OPTIONS=detect_leaks=0 ctest --test-dir "build-$job" -R mpi-comm --output-on-failure -j2
  fi
  if [ -x "$moec" ]; then
    trainer "$job"
  else
    echo "sanitize: no $moec (run make build first): the trainer is not checked" >&2
    exit 1
  fi
done
