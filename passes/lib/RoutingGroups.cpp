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
/// dispatch buffers of its permutes resized. With `shares` (sequences per
/// group), the groups are unequal and the capacity is the largest's.
LogicalResult regroup(FusedGateOp gate, int64_t groups, DenseI64ArrayAttr shares) {
  auto x = cast<RankedTensorType>(gate.getX().getType());
  int64_t batch = x.getRank() > 1 ? x.getShape().front() : 1;
  int64_t tokens = x.getNumElements() / x.getShape().back();
  int64_t perGroup = tokens / groups;
  OpBuilder b(gate);
  if (shares) {
    int64_t sum = 0, largest = 0;
    for (int64_t n : shares.asArrayRef())
      sum += n, largest = std::max(largest, n);
    if (sum != batch)
      return gate.emitOpError() << "cannot route in the module's moe.token_shares: they sum to "
                                << sum << " sequences, the batch has " << batch;
    int64_t sequence = tokens / batch;
    SmallVector<int64_t> sizes;
    for (int64_t n : shares.asArrayRef())
      sizes.push_back(n * sequence);
    perGroup = largest * sequence;
    gate.setGroupSizesAttr(b.getDenseI64ArrayAttr(sizes));
  } else {
    if (batch % groups != 0)
      return gate.emitOpError() << "cannot route in " << groups << " groups: the batch (" << batch
                                << " sequences) does not divide into whole-sequence groups";
    gate.removeGroupSizesAttr();
  }
  int64_t experts = cast<RankedTensorType>(gate.getCounts().getType()).getShape()[0];
  int64_t capacity;
  if (auto factor = gate.getCapacityFactor())
    capacity = static_cast<int64_t>(std::ceil(static_cast<double>(factor->convertToFloat()) *
                                              perGroup * gate.getTopK() / experts));
  else // dropless: a group's token count
    capacity = perGroup;
  // As the frontend sizes it: at least 1, at most the group's tokens.
  capacity = std::clamp<int64_t>(capacity, 1, perGroup);
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
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    auto shares = module->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kTokenSharesAttrName);
    if (shares) {
      // One group per share: per data replica, or the one-rank oracle's.
      int64_t n = static_cast<int64_t>(shares.size());
      int64_t replicas = grid ? grid.getDp() * grid.getEp() : 1;
      if ((g != 0 && g != n) || (replicas > 1 && replicas != n)) {
        mlir::emitError(module.getLoc())
            << "moe-routing-groups: the module's moe.token_shares give " << n
            << " routing groups, not " << (g != 0 && g != n ? g : replicas)
            << (g != 0 && g != n ? " (groups=)" : " (the grid's data replicas)");
        return signalPassFailure();
      }
      g = n;
    } else if (g == 0) {
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
        if ((static_cast<int64_t>(gate.getGroups()) != g || shares || gate.getGroupSizesAttr()) &&
            failed(regroup(gate, g, shares)))
          return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
