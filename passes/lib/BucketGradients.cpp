//===- BucketGradients.cpp - the moe-bucket-gradients pass ----------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::moe {
#define GEN_PASS_DEF_BUCKETGRADIENTSPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Whether `next` may join the bucket `run` (adjacent, same group,
/// reduction and scale, uncompressed, reading no member's result).
bool joins(AllReduceOp next, ArrayRef<AllReduceOp> run) {
  AllReduceOp first = run.front();
  if (next.getCodecAttr() || next.getAsync() || next.getAxes() != first.getAxes() ||
      next.getReduction() != first.getReduction() || next.getScale() != first.getScale())
    return false;
  Operation *producer = next.getInput().getDefiningOp();
  return !producer ||
         llvm::none_of(run, [&](AllReduceOp member) { return member.getOperation() == producer; });
}

int64_t numel(AllReduceOp op) { return cast<RankedTensorType>(op.getType()).getNumElements(); }

struct BucketGradientsPass : public moe::impl::BucketGradientsPassBase<BucketGradientsPass> {
  using BucketGradientsPassBase::BucketGradientsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (maxFloats < 1) {
      module.emitError("moe-bucket-gradients: max-floats must be >= 1");
      return signalPassFailure();
    }
    Builder builder(module.getContext());
    // moe-schedule's buckets (async) stay; their ids are taken.
    int64_t next = 0;
    module.walk([&](AllReduceOp op) {
      if (auto id = op->getAttrOfType<IntegerAttr>(MoEDialect::kBucketAttrName);
          id && op.getAsync())
        next = std::max(next, id.getInt() + 1);
    });
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      // Rebucket from scratch: the pass is idempotent.
      fn.walk([](AllReduceOp op) {
        if (!op.getAsync())
          op->removeAttr(MoEDialect::kBucketAttrName);
      });
      Block &body = fn.getBody().front();
      for (auto it = body.begin(); it != body.end();) {
        auto first = dyn_cast<AllReduceOp>(*it);
        if (!first || first.getCodecAttr() || first.getAsync()) {
          ++it;
          continue;
        }
        SmallVector<AllReduceOp> run = {first};
        int64_t total = numel(first);
        for (Operation *op = first->getNextNode(); op; op = op->getNextNode()) {
          auto r = dyn_cast<AllReduceOp>(op);
          if (!r || !joins(r, run) || (total += numel(r)) > maxFloats)
            break;
          run.push_back(r);
        }
        it = std::next(run.back()->getIterator());
        if (run.size() < 2)
          continue;
        for (AllReduceOp r : run)
          r->setAttr(MoEDialect::kBucketAttrName, builder.getI64IntegerAttr(next));
        ++next;
      }
    }
  }
};

} // namespace
