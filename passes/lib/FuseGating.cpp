//===- FuseGating.cpp - the moe-fuse-gating pass --------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_FUSEGATINGPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Replaces one router and the dispatch/combine ops it feeds.
LogicalResult fuse(RouterOp router) {
  int64_t experts = router.getNumExperts();
  std::optional<int64_t> capacity;
  SmallVector<DispatchOp> dispatches;
  SmallVector<CombineOp> combines;
  auto useCapacity = [&](Operation *user, int64_t e, int64_t c) -> LogicalResult {
    if (e != experts)
      return user->emitOpError() << "has " << e << " experts but its router scores " << experts
                                 << " (moe-fuse-gating)";
    if (capacity && *capacity != c)
      return user->emitOpError() << "has capacity " << c << " but another user of the same "
                                 << "router has " << *capacity << " (moe-fuse-gating)";
    capacity = c;
    return success();
  };
  // Visit users in program order, so messages name the later conflicting op.
  SmallVector<Operation *> users(router.getExperts().getUsers().begin(),
                                 router.getExperts().getUsers().end());
  llvm::sort(users, [](Operation *a, Operation *b) {
    return a->getBlock() == b->getBlock() ? a->isBeforeInBlock(b) : a < b;
  });
  for (Operation *user : users) {
    if (auto d = dyn_cast<DispatchOp>(user)) {
      auto shape = cast<RankedTensorType>(d.getType()).getShape();
      if (failed(useCapacity(user, shape[0], shape[1])))
        return failure();
      dispatches.push_back(d);
    } else if (auto c = dyn_cast<CombineOp>(user)) {
      auto shape = cast<RankedTensorType>(c.getY().getType()).getShape();
      if (failed(useCapacity(user, shape[0], shape[1])))
        return failure();
      combines.push_back(c);
    }
  }
  auto choices = cast<RankedTensorType>(router.getExperts().getType());
  int64_t tokens = choices.getNumElements() / choices.getShape().back();
  OpBuilder b(router);
  auto fused = FusedGateOp::create(
      b, router.getLoc(), router.getGates().getType(), choices, choices,
      RankedTensorType::get({experts}, b.getI32Type()), router.getAuxLoss().getType(),
      router.getScoringAttr(), router.getX(), router.getWeight(), router.getBias(),
      router.getTopKAttr(), b.getI64IntegerAttr(capacity.value_or(tokens)),
      router.getRenormalizeAttr(), router.getCapacityFactorAttr(), router.getAuxLossCoefAttr(),
      router.getZLossCoefAttr(), router.getRoutedScalingAttr(), b.getI64IntegerAttr(1),
      router.getBiasUpdateRateAttr(), /*group_sizes=*/nullptr, router.getExpertGroupsAttr(),
      router.getTopkGroupsAttr(), router.getAuxPerSequenceAttr());
  for (DispatchOp d : dispatches) {
    b.setInsertionPoint(d);
    d.replaceAllUsesWith(
        PermuteOp::create(b, d.getLoc(), d.getType(), d.getX(), fused.getSlots()).getResult());
    d.erase();
  }
  for (CombineOp c : combines) {
    b.setInsertionPoint(c);
    c.replaceAllUsesWith(
        UnpermuteOp::create(b, c.getLoc(), c.getType(), c.getY(), fused.getSlots(), c.getGates())
            .getResult());
    c.erase();
  }
  router.getGates().replaceAllUsesWith(fused.getGates());
  router.getExperts().replaceAllUsesWith(fused.getExperts());
  router.getAuxLoss().replaceAllUsesWith(fused.getAuxLoss());
  router.erase();
  return success();
}

struct FuseGatingPass : public moe::impl::FuseGatingPassBase<FuseGatingPass> {
  void runOnOperation() override {
    SmallVector<RouterOp> routers;
    getOperation().walk([&](RouterOp r) { routers.push_back(r); });
    for (RouterOp r : routers)
      if (failed(fuse(r)))
        return signalPassFailure();
  }
};

} // namespace
