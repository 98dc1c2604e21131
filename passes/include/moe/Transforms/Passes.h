//===- Passes.h - moe passes ------------------------------------*- C++ -*-===//

#ifndef MOE_TRANSFORMS_PASSES_H
#define MOE_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::moe {

#define GEN_PASS_DECL
#include "moe/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Transforms/Passes.h.inc"

/// Sequences of a step module's batch (its tokens input), 0 when unknown.
/// The data replicas (dp x ep) of a grid of `ranks` with tensor-parallel
/// degree `tp` (moe-make-grid's rule), 0 when tp does not divide ranks.
int64_t dataReplicas(int64_t ranks, int64_t tp);

int64_t batchSequences(ModuleOp module);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSES_H
