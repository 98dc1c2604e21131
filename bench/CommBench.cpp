//===- CommBench.cpp - latency and bandwidth of the thread communicator ---===//
//
// Calibrates the cost model's shared-host link (docs/CostModel.md): for p
// ranks as threads on this machine, the time of one rendezvous (a barrier
// and a one-float all_reduce) and of a 1 MiB all_reduce, medians over
// repetitions. Part of `make bench`.
//
//===----------------------------------------------------------------------===//

#include "moert/Comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <vector>

namespace {

struct Job {
  int reps;
  int64_t count; // floats per all_reduce (0: barrier)
  std::vector<double> seconds;
};

int run(moert_comm *comm, void *user) {
  auto *job = static_cast<Job *>(user);
  int p = moert_comm_size(comm);
  std::vector<int32_t> group(p);
  std::iota(group.begin(), group.end(), 0);
  std::vector<float> data(std::max<int64_t>(job->count, 1), 1.0f);
  auto once = [&] {
    return job->count ? moert_all_reduce_f32(comm, data.data(), job->count, group.data(), p)
                      : moert_barrier(comm, group.data(), p);
  };
  for (int i = 0; i < 10; ++i)
    if (once())
      return 1;
  for (int i = 0; i < job->reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    if (once())
      return 1;
    if (moert_comm_rank(comm) == 0)
      job->seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main() {
  std::printf("%-6s %16s %20s %22s\n", "ranks", "barrier (us)", "all_reduce 4 B (us)",
              "all_reduce 1 MiB (ms)");
  for (int p : {2, 4, 8}) {
    Job barrier{2000, 0, {}}, small{2000, 1, {}}, big{40, 1 << 18, {}};
    for (Job *job : {&barrier, &small, &big})
      if (moert_run_threads(p, 60.0, run, job)) {
        std::fprintf(stderr, "moe-bench-comm: a collective failed\n");
        return 1;
      }
    std::printf("%-6d %16.1f %20.1f %22.3f\n", p, 1e6 * median(barrier.seconds),
                1e6 * median(small.seconds), 1e3 * median(big.seconds));
  }
  return 0;
}
