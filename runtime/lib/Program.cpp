//===- Program.cpp - scalar routines generated step programs call ---------===//

#include "moert/Program.h"

#include "Placement.h"

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

extern "C" int moert_chunk_positions(int32_t *slots, int64_t n, int32_t *counts, int32_t positions,
                                     int64_t block, int32_t ranks, int32_t chunks) {
  if (ranks < 1 || chunks < 1 || positions % (ranks * chunks)) {
    std::fprintf(stderr, "error: %d positions do not cut into %d chunks of %d ranks\n", positions,
                 chunks, ranks);
    return 1;
  }
  int32_t local = positions / ranks, g = local / chunks;
  auto blockOf = [&](int32_t p) {
    int32_t q = p / local, j = p % local / g, l = p % g;
    return j * ranks * g + q * g + l;
  };
  std::vector<int32_t> moved(static_cast<size_t>(positions));
  for (int32_t p = 0; p < positions; ++p)
    moved[static_cast<size_t>(blockOf(p))] = counts[p];
  std::copy(moved.begin(), moved.end(), counts);
  for (int64_t i = 0; i < n; ++i)
    if (int32_t s = slots[i]; s >= 0)
      slots[i] = static_cast<int32_t>(blockOf(static_cast<int32_t>(s / block)) * block + s % block);
  return 0;
}

extern "C" int moert_place_slots(const moert_context *ctx, int32_t *outSlots,
                                 const int32_t *inSlots, int64_t n, int32_t *outCounts,
                                 const int32_t *inCounts, int32_t experts, const int32_t *order,
                                 int32_t positions, int64_t block) {
  // Each expert's positions in order.
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
  // A replicated expert's slots [0, valid) are cut into one run per replica,
  // sized by moert::splitLoads over this rank's counts (its estimate of the
  // group's) and the ep ranks' speeds; replica k's run starts at first[p].
  std::vector<double> valid(at.size(), 0.0);
  bool replicated = false;
  for (int32_t e = 0; e < experts; ++e) {
    valid[e] = static_cast<double>(std::min<int64_t>(std::max(inCounts[e], 0), block));
    replicated = replicated || at[e].size() > 1;
  }
  std::vector<double> parts;
  if (replicated)
    parts = moert::splitLoads(valid.data(), valid.size(), order, static_cast<size_t>(positions),
                              ctx ? ctx->run.ep : 1, ctx ? ctx->run.ep_speeds : nullptr);
  std::vector<int64_t> first(static_cast<size_t>(positions), 0);
  for (int32_t e = 0; e < experts; ++e) {
    const std::vector<int32_t> &mine = at[e];
    if (mine.empty())
      continue; // no position: an error below if a slot names it
    if (mine.size() == 1) {
      outCounts[mine[0]] = inCounts[e];
      continue;
    }
    // Whole slots: the parts rounded down, the rest one each to the largest
    // remainders (the first replica on ties).
    int64_t total = static_cast<int64_t>(valid[e]), given = 0;
    std::vector<int64_t> take(mine.size());
    for (size_t k = 0; k < mine.size(); ++k)
      given += take[k] = static_cast<int64_t>(std::floor(parts[mine[k]]));
    while (given < total) {
      size_t best = 0;
      for (size_t k = 1; k < mine.size(); ++k)
        if (parts[mine[k]] - static_cast<double>(take[k]) >
            parts[mine[best]] - static_cast<double>(take[best]))
          best = k;
      ++take[best];
      ++given;
    }
    for (size_t k = 0, start = 0; k < mine.size(); start += take[k], ++k) {
      first[mine[k]] = static_cast<int64_t>(start);
      outCounts[mine[k]] = static_cast<int32_t>(take[k]);
    }
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
    int64_t j = s % block;
    if (mine.size() == 1) {
      outSlots[i] = static_cast<int32_t>(mine[0] * block + j);
      continue;
    }
    // The replica whose run holds j (past every run, not a gate's slot:
    // the last replica, still inside its block).
    size_t k = mine.size() - 1;
    for (size_t c = 0; c + 1 < mine.size(); ++c)
      if (j < first[mine[c + 1]]) {
        k = c;
        break;
      }
    outSlots[i] = static_cast<int32_t>(mine[k] * block + (j - first[mine[k]]));
  }
  return 0;
}
