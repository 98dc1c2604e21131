//===- Placement.h - a MoE layer's placement table ------------*- C++ -*-===//
//
// A placement lists the expert at each position of a MoE layer (-1: an
// empty position; an expert at several positions is replicated). Shared by
// the step's collectives (StepComm.cpp) and online rebalancing
// (TrainerRebalance.cpp). Internal to the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_PLACEMENT_H
#define MOERT_LIB_PLACEMENT_H

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

} // namespace moert

#endif // MOERT_LIB_PLACEMENT_H
