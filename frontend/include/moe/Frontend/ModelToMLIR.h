//===- ModelToMLIR.h - model spec to moe dialect ----------------*- C++ -*-===//

#ifndef MOE_FRONTEND_MODELTOMLIR_H
#define MOE_FRONTEND_MODELTOMLIR_H

#include "moe/Frontend/ModelSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace moec::frontend {

/// Builds the forward training step of `spec` in the moe dialect: parameters,
/// a `train_step` function over token and target inputs returning the loss,
/// and the optimiser settings and seed as module attributes. Ops carry the
/// file:line:col of the JSON element they came from. The result verifies.
mlir::OwningOpRef<mlir::ModuleOp> buildModule(const ModelSpec &spec, mlir::MLIRContext &context);

/// Capacity (slots per expert) of a layer's dispatch buffer for `tokens`
/// tokens: ceil(capacity_factor * tokens * top_k / experts), at most
/// `tokens`; `tokens` (dropless) without a capacity factor.
int64_t expertCapacity(const MoESettings &moe, int64_t tokens);

} // namespace moec::frontend

#endif // MOE_FRONTEND_MODELTOMLIR_H
