//===- RoutingGroups.cpp - the moe-routing-groups pass --------------------===//

#include "DispatchBuffers.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <algorithm>
#include <cmath>

namespace mlir::moe {
#define GEN_PASS_DEF_ROUTINGGROUPSPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Routes `gate`'s tokens in `groups` groups: capacity per group, and the
/// dispatch buffers of its permutes resized.
LogicalResult regroup(FusedGateOp gate, int64_t groups) {
  auto x = cast<RankedTensorType>(gate.getX().getType());
  int64_t batch = x.getRank() > 1 ? x.getShape().front() : 1;
  if (batch % groups != 0)
    return gate.emitOpError() << "cannot route in " << groups << " groups: the batch (" << batch
                              << " sequences) does not divide into whole-sequence groups";
  int64_t tokens = x.getNumElements() / x.getShape().back();
  int64_t perGroup = tokens / groups;
  int64_t experts = cast<RankedTensorType>(gate.getCounts().getType()).getShape()[0];
  int64_t capacity;
  if (auto factor = gate.getCapacityFactor())
    capacity = static_cast<int64_t>(std::ceil(static_cast<double>(factor->convertToFloat()) *
                                              perGroup * gate.getTopK() / experts));
  else // dropless: a group's token count
    capacity = perGroup;
  // As the frontend sizes it: at least 1, at most the group's tokens.
  capacity = std::clamp<int64_t>(capacity, 1, perGroup);
  OpBuilder b(gate);
  gate.setGroupsAttr(b.getI64IntegerAttr(groups));
  gate.setCapacityAttr(b.getI64IntegerAttr(capacity));
  for (Operation *user : gate.getSlots().getUsers())
    if (auto permute = dyn_cast<PermuteOp>(user))
      if (failed(retypeDispatchBuffer(permute.getResult(), groups * capacity)))
        return failure();
  return success();
}

struct RoutingGroupsPass : public moe::impl::RoutingGroupsPassBase<RoutingGroupsPass> {
  using RoutingGroupsPassBase::RoutingGroupsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t g = groups;
    if (g < 0) {
      mlir::emitError(module.getLoc()) << "moe-routing-groups: groups must be >= 0, got " << g;
      return signalPassFailure();
    }
    if (g == 0) {
      auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
      g = grid ? grid.getDp() * grid.getEp() : 1;
    }
    WalkResult result = module.walk([&](Operation *op) {
      if (isa<RouterOp, RouterGradOp>(op) && g > 1) {
        op->emitOpError("routing groups apply to moe.fused_gate: run "
                        "moe-fuse-gating first, and this pass before "
                        "moe-autodiff");
        return WalkResult::interrupt();
      }
      if (auto gate = dyn_cast<FusedGateOp>(op))
        if (gate.getGroups() != g && failed(regroup(gate, g)))
          return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
