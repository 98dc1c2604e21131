//===- Passes.h - moe passes ------------------------------------*- C++ -*-===//

#ifndef MOE_TRANSFORMS_PASSES_H
#define MOE_TRANSFORMS_PASSES_H

#include "moe/Dialect/MoE/MoEDialect.h"

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

/// Why moe-partition and the runtime cannot execute `grid` on `module`
/// (moe-executable-plan's test, including what the plan needs that the
/// step program does not run: MoEDialect::kPlanNeedsAttrName), or "" when
/// they can.
std::string whyNotExecutable(ModuleOp module, GridAttr grid);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSES_H
