//===- Program.cpp - scalar routines generated step programs call ---------===//

#include "moert/Program.h"

#include <algorithm>
#include <cmath>
#include <vector>

extern "C" float moert_lr_schedule(int32_t step, double lr, double minLr, int64_t warmup,
                                   int64_t total, int schedule) {
  // Same as moe.lr_schedule: schedule 0 cosine, 1 linear, 2 constant.
  double t = step + 1.0;
  if (t <= static_cast<double>(warmup))
    return static_cast<float>(lr * t / static_cast<double>(warmup));
  double p = std::min(1.0, (t - warmup) / std::max(1.0, double(total - warmup)));
  double rate = schedule == 0   ? minLr + (lr - minLr) * (1 + std::cos(M_PI * p)) / 2
                : schedule == 1 ? lr - (lr - minLr) * p
                                : lr;
  return static_cast<float>(rate);
}

extern "C" void moert_fill(float *data, int64_t count, float value) {
  std::fill(data, data + count, value);
}

extern "C" void moert_place_slots(int32_t *outSlots, const int32_t *inSlots, int64_t n,
                                  int32_t *outCounts, const int32_t *inCounts, int32_t experts,
                                  const int32_t *order, int64_t block) {
  std::vector<int64_t> pos(static_cast<size_t>(experts));
  for (int32_t p = 0; p < experts; ++p) {
    pos[order[p]] = p;
    outCounts[p] = inCounts[order[p]];
  }
  // The slots come from the fused gate kernel: in [0, experts * block).
  for (int64_t i = 0; i < n; ++i) {
    int32_t s = inSlots[i];
    outSlots[i] = s < 0 ? -1 : static_cast<int32_t>(pos[s / block] * block + s % block);
  }
}
