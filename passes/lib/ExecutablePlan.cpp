//===- ExecutablePlan.cpp - the moe-executable-plan pass ------------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::moe {
#define GEN_PASS_DEF_EXECUTABLEPLANPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

std::string mlir::moe::whyNotExecutable(ModuleOp module, GridAttr grid) {
  if (auto needs = module->getAttrOfType<StringAttr>(MoEDialect::kPlanNeedsAttrName))
    return "it needs " + needs.getValue().str() + ", which the step program does not run yet";
  int64_t replicas = grid.getDp() * grid.getEp();
  if (int64_t tp = grid.getTp(); tp > 1) {
    // moe-partition splits heads and FFN widths over tp.
    std::string why;
    module.walk([&](Operation *op) {
      if (!why.empty())
        return;
      if (auto att = dyn_cast<AttentionOp>(op);
          att && (att.getNumHeads() % tp != 0 || att.getNumKvHeads() % tp != 0))
        why = "tp = " + std::to_string(tp) + " does not divide the " +
              std::to_string(att.getNumHeads()) + " heads and " +
              std::to_string(att.getNumKvHeads()) + " key/value heads";
      if (auto att = dyn_cast<LatentAttentionOp>(op); att && att.getNumHeads() % tp != 0)
        why = "tp = " + std::to_string(tp) + " does not divide the " +
              std::to_string(att.getNumHeads()) + " heads";
      Value up = isa<FFNOp>(op)         ? cast<FFNOp>(op).getWUp()
                 : isa<ExpertFFNOp>(op) ? cast<ExpertFFNOp>(op).getWUp()
                                        : Value();
      if (up && cast<RankedTensorType>(up.getType()).getShape().back() % tp != 0)
        why = "tp = " + std::to_string(tp) + " does not divide an FFN width (" +
              std::to_string(cast<RankedTensorType>(up.getType()).getShape().back()) + ")";
    });
    if (!why.empty())
      return why;
  }
  // Unequal shares (moe.token_shares) are whole sequences already.
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (module->hasAttr(MoEDialect::kTokenSharesAttrName))
      break;
    auto tokens = fn.getNumArguments() ? dyn_cast<RankedTensorType>(fn.getArgument(0).getType())
                                       : RankedTensorType();
    if (tokens && tokens.getRank() == 2 && tokens.getShape()[0] < replicas)
      return "the batch of " + std::to_string(tokens.getShape()[0]) +
             " sequences cannot give each of its " + std::to_string(replicas) +
             " data replicas (dp x ep) one";
    if (tokens && tokens.getRank() == 2 && !grid.getDevices() && tokens.getShape()[0] % replicas)
      return "the batch of " + std::to_string(tokens.getShape()[0]) +
             " sequences does not split over its " + std::to_string(replicas) +
             " data replicas (dp x ep)";
    break;
  }
  if (grid.getDevices())
    return "it gives the device kinds of a mixed cluster unequal shares of tokens, which "
           "run as whole sequences per replica only (moe-plan-sharding token-shares=true "
           "writes them as moe.token_shares)";

  std::string why;
  module.walk([&](ExpertFFNOp ffn) {
    int64_t experts = cast<RankedTensorType>(ffn.getX().getType()).getShape()[0];
    // moe-partition executes any placement (uneven, pinned, replicated);
    // without one, equal contiguous blocks.
    auto placement = ffn->getAttrOfType<PlacementAttr>("placement");
    if (why.empty() && !placement && experts % grid.getEp())
      why = std::to_string(experts) +
            " experts do not split evenly over ep = " + std::to_string(grid.getEp());
  });
  return why;
}

namespace {

struct ExecutablePlanPass : public moe::impl::ExecutablePlanPassBase<ExecutablePlanPass> {
  using ExecutablePlanPassBase::ExecutablePlanPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    auto needs = module->getAttrOfType<StringAttr>(MoEDialect::kPlanNeedsAttrName);
    if (!grid || (grid.getNumRanks() == 1 && !needs))
      return;
    std::string why = whyNotExecutable(module, grid);
    if (why.empty())
      return;
    if (needs) {
      // No grid of this cluster holds the step as the program runs it.
      if (strict) {
        mlir::emitError(module.getLoc())
            << "no plan of the cluster fits the step as the step program runs it: the best "
               "needs "
            << needs.getValue()
            << ", which it does not run yet; give a larger cluster, a smaller batch or model "
               "(--emit=plan reports the plan)";
        return signalPassFailure();
      }
      module.emitWarning() << "the cluster's plan needs " << needs.getValue()
                           << ", which the step program does not run yet; the emitted step "
                              "stays on one rank";
      module->removeAttr(MoEDialect::kGridAttrName);
      module.walk([](ExpertFFNOp ffn) { ffn->removeAttr("placement"); });
      return;
    }
    std::string shape = "dp " + std::to_string(grid.getDp()) + " x ep " +
                        std::to_string(grid.getEp()) + " x tp " + std::to_string(grid.getTp());
    if (strict) {
      mlir::emitError(module.getLoc())
          << "the cluster's plan (" << shape << ") is not executable: " << why
          << "; force degrees the runtime runs with --dp/--ep/--tp, or use "
             "--emit=plan for the report alone";
      return signalPassFailure();
    }
    module.emitWarning() << "the cluster's plan (" << shape << ") is not executable (" << why
                         << "); the emitted step stays on one rank";
    module->removeAttr(MoEDialect::kGridAttrName);
    module.walk([](ExpertFFNOp ffn) { ffn->removeAttr("placement"); });
  }
};

} // namespace
