//===- AddEvalStep.cpp - the moe-add-eval-step pass -----------------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::moe {
#define GEN_PASS_DEF_ADDEVALSTEPPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct AddEvalStepPass : public moe::impl::AddEvalStepPassBase<AddEvalStepPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> steps;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn->hasAttr(MoEDialect::kNoGradAttrName))
        return; // already has one
      if (!fn.isExternal())
        steps.push_back(fn);
    }
    if (steps.empty())
      return;
    if (steps.size() > 1) {
      steps[1].emitError("moe-add-eval-step: the module has more than one step "
                         "function; give it one");
      return signalPassFailure();
    }
    if (module.lookupSymbol("eval_step")) {
      steps.front().emitError("moe-add-eval-step: the step is itself named "
                              "@eval_step; rename it");
      return signalPassFailure();
    }
    auto eval = steps.front().clone();
    eval.setName("eval_step");
    eval->setAttr(MoEDialect::kNoGradAttrName, UnitAttr::get(&getContext()));
    returnLanguageModelLoss(eval);
    module.push_back(eval);
  }

  /// Evaluation reports the language-model loss (the next-token cross
  /// entropy), as validation losses are compared across frameworks: the
  /// routers' auxiliary losses added to it in training stay out. A step
  /// with no single cross entropy keeps its returned loss.
  static void returnLanguageModelLoss(func::FuncOp eval) {
    SmallVector<CrossEntropyOp> losses;
    eval.walk([&](CrossEntropyOp op) { losses.push_back(op); });
    if (losses.size() != 1)
      return;
    Operation *terminator = eval.getBody().back().getTerminator();
    if (terminator->getNumOperands() != 1 || terminator->getOperand(0) == losses[0].getResult())
      return;
    Operation *total = terminator->getOperand(0).getDefiningOp();
    terminator->setOperand(0, losses[0].getResult());
    if (total && total->use_empty() && isa<AddOp>(total))
      total->erase();
  }
};

} // namespace
