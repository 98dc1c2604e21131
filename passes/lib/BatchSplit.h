//===- BatchSplit.h - a step's batch split, its gates regrouped -*- C++ -*-===//
//
// moe-partition splits a step's batch over data replicas, moe-micro-batches
// over the micro-batches of one step, and moe-routing-groups routes a fused
// gate's tokens in groups: these helpers retype the step (forward only,
// fused gating, before moe-autodiff) in place.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_PASSES_LIB_BATCHSPLIT_H
#define MOE_PASSES_LIB_BATCHSPLIT_H

#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::moe {

/// Splits the batch of `fn` (its tokens and targets inputs and every value
/// with their leading batch dimension) into `parts`: each keeps `local`
/// sequences (the batch / parts when negative; an error names `what` when
/// it does not divide). With `splitGates`, each fused gate's routing groups
/// and dispatch buffers are divided by `parts` too (a data replica's share
/// of a step routed in groups); without, they are left for routeInGroups.
LogicalResult splitBatch(func::FuncOp fn, int64_t parts, int64_t local, bool splitGates,
                         StringRef what = "data replicas (dp * ep)");

/// Routes `gate`'s tokens in `groups` groups: capacity per group, and the
/// dispatch buffers of its permutes resized. With `shares` (sequences per
/// group), the groups are unequal and the capacity is the largest's.
LogicalResult routeInGroups(FusedGateOp gate, int64_t groups, DenseI64ArrayAttr shares);

} // namespace mlir::moe

#endif // MOE_PASSES_LIB_BATCHSPLIT_H
