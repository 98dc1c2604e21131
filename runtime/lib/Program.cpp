//===- Program.cpp - scalar routines generated step programs call ---------===//

#include "moert/Program.h"

#include <algorithm>
#include <cmath>

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
