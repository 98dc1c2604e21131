//===- ShardCopies.h - how many ranks hold the same piece -------*- C++ -*-===//
//
// For moe.global_norm's shard_copies (moe-insert-collectives, and
// moe-shard-optimizer after it): a piece of a parameter's gradient is
// divided over the expert split (moe.shard, ep), tensor parallelism
// (moe.tp_dim, tp) and whatever else shards it (ZeRO's group); over every
// other axis of the norm's group the same values sit on several ranks,
// each of which counts 1/copies.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_LIB_SHARDCOPIES_H
#define MOE_TRANSFORMS_LIB_SHARDCOPIES_H

#include "moe/Dialect/MoE/MoEOps.h"

namespace mlir::moe {

/// Ranks of the group of `axes` holding the same values as this rank's
/// piece of `param`, which `divided` (may be null) shards besides ep and tp.
inline int64_t shardCopies(ParamOp param, GridAttr grid, ArrayAttr axes, ArrayAttr divided = {}) {
  int64_t copies = 1;
  for (Attribute axis : axes) {
    StringRef name = cast<StringAttr>(axis).getValue();
    bool split = (divided && llvm::is_contained(divided, axis)) ||
                 (name == "ep" && param && param->hasAttr(MoEDialect::kShardAttrName)) ||
                 (name == "tp" && param && param->hasAttr(MoEDialect::kTpDimAttrName));
    if (!split)
      copies *= grid.getGroupSize({axis});
  }
  return copies;
}

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_LIB_SHARDCOPIES_H
