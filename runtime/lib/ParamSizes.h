//===- ParamSizes.h - how many floats a rank holds of a parameter ---------===//
//
// What the trainer allocates for a parameter and its AdamW moments, which
// the device layer (runtime/devices/DeviceArenas.cpp) mirrors on the device.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_PARAMSIZES_H
#define MOERT_LIB_PARAMSIZES_H

#include "moert/Program.h"

#include <algorithm>
#include <cstdint>

namespace moert {

/// The elements of parameter `p` (of this rank's block).
inline int64_t paramElements(const moert_param_info &p) {
  int64_t n = 1;
  for (int i = 0; i < p.rank; ++i)
    n *= p.shape[i];
  return n;
}

/// ZeRO (zero_parts > 1): the elements of each rank's shard, ceil(n / P);
/// else n. The AdamW moments hold this many, the parameter P times it.
inline int64_t zeroShardElements(const moert_param_info &p) {
  int64_t n = paramElements(p), parts = std::max(p.zero_parts, 1);
  return (n + parts - 1) / parts;
}

/// The floats the parameter's buffer holds: its ZeRO shards padded to P
/// equal ones, else its elements.
inline int64_t paramBufferElements(const moert_param_info &p) {
  return p.zero_parts > 1 ? p.zero_parts * zeroShardElements(p) : paramElements(p);
}

} // namespace moert

#endif // MOERT_LIB_PARAMSIZES_H
