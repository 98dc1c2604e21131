//===- MicroBatches.cpp - the moe-micro-batches pass ----------------------===//
//
// Gradient accumulation: each step function takes one micro-batch of the
// batch; the step program runs it once per micro-batch and sums the
// gradients (codegen/lib/StepProgram.cpp). See docs/Partitioning.md.
//
//===----------------------------------------------------------------------===//

#include "BatchSplit.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MICROBATCHESPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct MicroBatchesPass : public moe::impl::MicroBatchesPassBase<MicroBatchesPass> {
  using MicroBatchesPassBase::MicroBatchesPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t m = count;
    auto given = module->getAttrOfType<IntegerAttr>(MoEDialect::kMicroBatchesAttrName);
    if (m < 0) {
      emitError(module.getLoc()) << "moe-micro-batches: count must be >= 0, got " << m;
      return signalPassFailure();
    }
    if (m == 0)
      m = given ? given.getInt() : 1;
    module->setAttr(MoEDialect::kMicroBatchesAttrName,
                    IntegerAttr::get(IntegerType::get(module.getContext(), 64), m));
    if (m == 1)
      return;
    if (module->hasAttr(MoEDialect::kTokenSharesAttrName)) {
      emitError(module.getLoc())
          << "moe-micro-batches: " << m
          << " micro-batches with unequal token shares (moe.token_shares) are not supported; "
             "give equal shares or one micro-batch";
      return signalPassFailure();
    }
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    int64_t replicas = grid ? grid.getDp() * grid.getEp() : 1;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      for (BlockArgument arg : fn.getArguments()) {
        auto kind = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), MoEDialect::kInputAttrName);
        auto type = dyn_cast<RankedTensorType>(arg.getType());
        if (!kind || kind.getValue() != "tokens" || !type || type.getRank() < 2)
          continue;
        int64_t batch = type.getShape()[0];
        if (batch % (m * replicas) != 0) {
          InFlightDiagnostic diag = fn.emitError()
                                    << "moe-micro-batches: the batch of " << batch
                                    << " sequences does not split into " << m << " micro-batches";
          if (replicas > 1)
            diag << " of " << replicas << " data replicas (dp x ep) each";
          diag << "; choose a micro-batch count that divides " << batch / replicas;
          return signalPassFailure();
        }
      }
      if (failed(splitBatch(fn, m, -1, /*splitGates=*/false, "micro-batches")))
        return signalPassFailure();
      // Capacity and dispatch buffers for the micro-batch's tokens.
      WalkResult sized = fn.walk([&](FusedGateOp gate) {
        if (failed(routeInGroups(gate, gate.getGroups(), nullptr)))
          return WalkResult::interrupt();
        return WalkResult::advance();
      });
      if (sized.wasInterrupted())
        return signalPassFailure();
    }
  }
};

} // namespace
