//===- Placement.h - a MoE layer's placement table ------------*- C++ -*-===//
//
// A placement lists the expert at each position of a MoE layer (-1: an
// empty position; an expert at several positions is replicated). Shared by
// the step's collectives (StepComm.cpp), moe.place_slots (Program.cpp) and
// online rebalancing (trainer/Rebalancer.cpp). Internal to the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_PLACEMENT_H
#define MOERT_LIB_PLACEMENT_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moert {

/// How many of the `positions` entries of `table` hold each expert (index:
/// expert id), for at least `experts` experts.
inline std::vector<int32_t> replicaCounts(const int32_t *table, size_t positions,
                                          size_t experts = 0) {
  std::vector<int32_t> count(experts, 0);
  for (size_t p = 0; p < positions; ++p)
    if (int32_t e = table[p]; e >= 0) {
      if (static_cast<size_t>(e) >= count.size())
        count.resize(static_cast<size_t>(e) + 1, 0);
      ++count[e];
    }
  return count;
}

/// Each position's token-slots when the experts of a MoE layer carry
/// `load[e]` slots under `table` (`positions` entries, positions / ep per
/// ep rank; `speeds`: the ep ranks' relative speeds, null for equal). An
/// expert at one position puts its load there. A replicated expert's load
/// is split among the ranks that hold it so that they finish as evenly as
/// possible: after the single experts, the replicated ones, heaviest first
/// (then by id), each water-fill its ranks (their times, load over speed,
/// rise to one level, the slower ranks' first); a rank with two replicas of
/// one expert halves its part between them. Only the ratios of the loads
/// matter, so a rank may split from its own counts (the load it sees)
/// without asking the others.
inline std::vector<double> splitLoads(const double *load, size_t experts, const int32_t *table,
                                      size_t positions, int ep, const double *speeds) {
  std::vector<double> out(positions, 0.0);
  if (ep < 1 || positions % static_cast<size_t>(ep) != 0)
    ep = 1;
  size_t local = positions / static_cast<size_t>(ep);
  auto speed = [&](size_t r) { return speeds && speeds[r] > 0 ? speeds[r] : 1.0; };
  std::vector<int32_t> replicas = replicaCounts(table, positions, experts);
  std::vector<double> ranks(static_cast<size_t>(ep), 0.0);
  std::vector<int32_t> shared;
  for (size_t p = 0; p < positions; ++p) {
    int32_t e = table[p];
    if (e < 0 || static_cast<size_t>(e) >= experts)
      continue;
    if (replicas[e] == 1) {
      out[p] = load[e];
      ranks[p / local] += load[e];
    } else if (std::find(shared.begin(), shared.end(), e) == shared.end()) {
      shared.push_back(e);
    }
  }
  std::stable_sort(shared.begin(), shared.end(), [&](int32_t a, int32_t b) {
    return load[a] > load[b] || (load[a] == load[b] && a < b);
  });
  for (int32_t e : shared) {
    // The ranks holding e, by time; the level T with sum max(0, T s - L) = A.
    std::vector<size_t> held;
    for (size_t p = 0; p < positions; ++p)
      if (table[p] == e && std::find(held.begin(), held.end(), p / local) == held.end())
        held.push_back(p / local);
    std::stable_sort(held.begin(), held.end(),
                     [&](size_t a, size_t b) { return ranks[a] / speed(a) < ranks[b] / speed(b); });
    double amount = std::max(load[e], 0.0), level = 0, sumLoad = 0, sumSpeed = 0;
    size_t active = 0;
    while (active < held.size()) {
      sumLoad += ranks[held[active]];
      sumSpeed += speed(held[active]);
      ++active;
      level = (amount + sumLoad) / sumSpeed;
      if (active == held.size() || level <= ranks[held[active]] / speed(held[active]))
        break;
    }
    for (size_t i = 0; i < active; ++i) {
      size_t r = held[i];
      double part = std::max(0.0, level * speed(r) - ranks[r]);
      size_t copies = 0;
      for (size_t p = r * local; p < (r + 1) * local; ++p)
        copies += table[p] == e;
      for (size_t p = r * local; p < (r + 1) * local; ++p)
        if (table[p] == e)
          out[p] = part / static_cast<double>(copies);
      ranks[r] += part;
    }
  }
  return out;
}

} // namespace moert

#endif // MOERT_LIB_PLACEMENT_H
