//===- DispatchBuffers.h - retyping the dispatch buffer chain ---*- C++ -*-===//
//
// moe-routing-groups and moe-partition change the slots per expert of a
// dispatch buffer `permute -> expert_ffn -> unpermute` (forward only,
// before moe-autodiff). This helper retypes the chain in place.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_PASSES_LIB_DISPATCHBUFFERS_H
#define MOE_PASSES_LIB_DISPATCHBUFFERS_H

#include "moe/Dialect/MoE/MoEOps.h"

namespace mlir::moe {

/// Gives `buffer` (a [E, C, D] dispatch buffer) `slots` rows per expert
/// (`dim` 1; with `dim` 0, `slots` experts) and propagates the type through
/// the expert FFNs it feeds. Fails at a user that is neither an expert_ffn
/// nor an unpermute.
inline LogicalResult retypeDispatchBuffer(Value buffer, int64_t slots, unsigned dim = 1) {
  auto type = cast<RankedTensorType>(buffer.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = slots;
  buffer.setType(RankedTensorType::get(shape, type.getElementType()));
  for (Operation *user : buffer.getUsers()) {
    if (isa<UnpermuteOp>(user))
      continue;
    auto ffn = dyn_cast<ExpertFFNOp>(user);
    if (!ffn || ffn.getX() != buffer)
      return user->emitOpError() << "uses a dispatch buffer whose slots change; expected only "
                                    "moe.expert_ffn and moe.unpermute (run before moe-autodiff)";
    if (failed(retypeDispatchBuffer(ffn.getResult(), slots, dim)))
      return failure();
  }
  return success();
}

} // namespace mlir::moe

#endif // MOE_PASSES_LIB_DISPATCHBUFFERS_H
