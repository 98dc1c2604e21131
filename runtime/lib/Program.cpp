//===- Program.cpp - scalar routines generated step programs call ---------===//

#include "moert/Program.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
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

extern "C" void moert_fill_half(uint16_t *data, int64_t count, uint16_t bits) {
  std::fill(data, data + count, bits);
}

extern "C" void moert_widen(float *out, const uint16_t *in, int64_t count, int bf16) {
  for (int64_t i = 0; i < count; ++i) {
    uint32_t h = in[i], bits;
    if (bf16) {
      bits = h << 16;
    } else { // IEEE half: sign, 5-bit exponent, 10-bit mantissa
      uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
      if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); // inf, nan
      } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
      } else if (man == 0) {
        bits = sign;
      } else { // subnormal: normalise
        int shift = 0;
        while (!(man & 0x400u))
          man <<= 1, ++shift;
        bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((man & 0x3ffu) << 13);
      }
    }
    std::memcpy(&out[i], &bits, 4);
  }
}

extern "C" int moert_place_slots(int32_t *outSlots, const int32_t *inSlots, int64_t n,
                                 int32_t *outCounts, const int32_t *inCounts, int32_t experts,
                                 const int32_t *order, int32_t positions, int64_t block) {
  // Each expert's positions in order (replicas deal its slots in turn).
  std::vector<std::vector<int32_t>> at(static_cast<size_t>(std::max(experts, 0)));
  for (int32_t p = 0; p < positions; ++p) {
    int32_t e = order[p];
    if (e < -1 || e >= experts) {
      std::fprintf(stderr, "error: the placement names expert %d at position %d, outside [0, %d)\n",
                   e, p, experts);
      return 1;
    }
    if (e >= 0)
      at[e].push_back(p);
  }
  for (int32_t p = 0; p < positions; ++p)
    outCounts[p] = 0;
  for (int32_t e = 0; e < experts; ++e) {
    int64_t replicas = static_cast<int64_t>(at[e].size());
    if (replicas == 1) {
      outCounts[at[e][0]] = inCounts[e];
      continue;
    }
    int64_t valid = std::min<int64_t>(std::max(inCounts[e], 0), block);
    for (int64_t k = 0; k < replicas; ++k)
      outCounts[at[e][k]] =
          static_cast<int32_t>(valid > k ? (valid - k + replicas - 1) / replicas : 0);
  }
  // The slots come from the fused gate kernel: in [0, experts * block).
  for (int64_t i = 0; i < n; ++i) {
    int32_t s = inSlots[i];
    if (s < 0) {
      outSlots[i] = -1;
      continue;
    }
    const std::vector<int32_t> &mine = at[s / block];
    if (mine.empty()) {
      std::fprintf(stderr, "error: the placement holds no replica of expert %lld\n",
                   static_cast<long long>(s / block));
      return 1;
    }
    int64_t replicas = static_cast<int64_t>(mine.size()), j = s % block;
    outSlots[i] = static_cast<int32_t>(mine[j % replicas] * block + j / replicas);
  }
  return 0;
}
