//===- MakeGrid.cpp - the moe-make-grid pass ------------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <numeric>

namespace mlir::moe {
#define GEN_PASS_DEF_MAKEGRIDPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct MakeGridPass : public moe::impl::MakeGridPassBase<MakeGridPass> {
  using MakeGridPassBase::MakeGridPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      module.emitError("moe-make-grid: ") << message;
      signalPassFailure();
    };
    if (ranks < 1)
      return fail("ranks must be >= 1");
    if (ep < 0)
      return fail("ep must be >= 0");
    if (tp < 1)
      return fail("tp must be >= 1");
    if (ranks == 1) {
      if (ep > 1 || tp > 1 || dp > 1)
        return fail("dp " + Twine(std::max<int64_t>(dp, 1)) + " x ep " +
                    Twine(std::max<int64_t>(ep, 1)) + " x tp " + Twine(tp) + " needs ranks > 1");
      return;
    }
    if (ranks % tp != 0)
      return fail("tp " + Twine(tp) + " does not divide ranks " + Twine(ranks));
    // Tensor-parallel ranks share their replica's tokens.
    int64_t replicas = dataReplicas(ranks, tp);
    int64_t epGiven = ep;
    if (dp < 0)
      return fail("dp must be >= 0");
    if (dp) {
      // dp x ep x tp = ranks: dp alone sets ep.
      if (replicas % dp != 0 || (ep && dp * ep != replicas))
        return fail("dp " + Twine(dp) + (ep ? " x ep " + Twine(ep) : Twine("")) + " x tp " +
                    Twine(tp) + " does not make ranks " + Twine(ranks));
      epGiven = replicas / dp;
    }
    if (module->hasAttr(MoEDialect::kGridAttrName))
      return fail("the module already has a moe.grid");
    // The expert count every layer's ep must divide.
    int64_t experts = 0;
    module.walk([&](ExpertFFNOp ffn) {
      experts = std::gcd(experts, cast<RankedTensorType>(ffn.getX().getType()).getShape()[0]);
    });
    int64_t degree = epGiven   ? epGiven
                     : experts ? std::gcd<int64_t>(experts, int64_t(replicas))
                               : 1;
    if (replicas % degree != 0)
      return fail(tp == 1
                      ? "ep " + Twine(degree) + " does not divide ranks " + Twine(ranks)
                      : "ep " + Twine(degree) + " does not divide ranks / tp = " + Twine(replicas));
    if (experts && experts % degree != 0)
      return fail("ep " + Twine(degree) + " does not divide the " + Twine(experts) +
                  " experts of a layer");
    // Each data replica takes whole sequences of the batch.
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.getNumArguments() == 0)
        continue;
      auto tokens = dyn_cast<RankedTensorType>(fn.getArgument(0).getType());
      if (tokens && tokens.getRank() == 2 && tokens.getShape()[0] % replicas != 0)
        return fail("the batch of " + Twine(tokens.getShape()[0]) +
                    " sequences does not split over " + Twine(replicas) +
                    " data replicas (dp x ep); choose a divisor of the batch size");
      break;
    }
    module->setAttr(MoEDialect::kGridAttrName,
                    GridAttr::get(&getContext(), replicas / degree, degree, tp, nullptr));
  }
};

} // namespace

int64_t mlir::moe::dataReplicas(int64_t ranks, int64_t tp) {
  return tp > 0 && ranks % tp == 0 ? ranks / tp : 0;
}
