//===- RoutingGroups.cpp - the moe-routing-groups pass --------------------===//

#include "BatchSplit.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_ROUTINGGROUPSPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

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
            failed(routeInGroups(gate, g, shares)))
          return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
