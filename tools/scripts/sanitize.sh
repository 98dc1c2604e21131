#!/usr/bin/env bash
# The sanitizer jobs of CI: the runtime (plain C++: data, checkpoints,
# codecs, scratch pool, the thread and MPI communicators) built with
# AddressSanitizer + UndefinedBehaviorSanitizer and with ThreadSanitizer, its
# unit tests run under each. Any report fails the job.
#   tools/scripts/sanitize.sh            # both
#   tools/scripts/sanitize.sh asan|tsan  # one
set -euo pipefail
cd "$(dirname "$0")/../.."
./tools/scripts/install-deps.sh >/dev/null
jobs=${*:-asan tsan}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
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
done
