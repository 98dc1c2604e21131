//===- ShardOptimizer.cpp - the moe-shard-optimizer pass (ZeRO) -----------===//
//
// ZeRO stages 1 and 2 on a partitioned step (after moe-insert-collectives):
// each gradient's all-reduce over its replica group becomes a flat
// reduce-scatter over the same group, the AdamW update touches this rank's
// shard of the parameter (its moments shrink to the shard), and a
// moe.gather_param after the updates puts each parameter back together.
// Stage 1 keeps the reductions where moe-insert-collectives put them (after
// the backward, so every full gradient is alive at its end); stage 2 moves
// each to just after its gradient's producer, so a full gradient dies as
// soon as it is reduced and only the shards stay until the optimiser.
// (moe-schedule, after lowering, may then start the reduce-scatters in the
// background.)
//
//===----------------------------------------------------------------------===//

#include "ShardCopies.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <algorithm>

namespace mlir::moe {
#define GEN_PASS_DEF_SHARDOPTIMIZERPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

LogicalResult shard(func::FuncOp fn, ArrayAttr everyAxis, int64_t stage) {
  auto module = fn->getParentOfType<ModuleOp>();
  auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
  auto copiesOf = [&](StringRef name, ArrayAttr zeroAxes) {
    return shardCopies(module.lookupSymbol<ParamOp>(name), grid, everyAxis, zeroAxes);
  };
  DenseMap<Value, int64_t> copies; // the norm's operands
  SmallVector<AdamWUpdateOp> updates(fn.getOps<AdamWUpdateOp>());
  if (updates.empty())
    return success();
  GlobalNormOp norm;
  for (GlobalNormOp n : fn.getOps<GlobalNormOp>())
    norm = n;
  OpBuilder b(fn.getContext());
  SmallVector<std::pair<FlatSymbolRefAttr, ArrayAttr>> gathers;
  DenseMap<Value, Value> shards; // reduced gradient -> its shard
  for (AdamWUpdateOp update : updates) {
    Value grad = update.getGrad();
    if (grad.getDefiningOp<ReplicaSumOp>())
      return update.emitOpError()
             << "ZeRO cannot shard '" << update.getParam()
             << "': its layer's placement has room for expert replicas (--redundant-experts)";
    auto reduce = grad.getDefiningOp<AllReduceOp>();
    int64_t group = reduce ? grid.getGroupSize(reduce.getAxes().getValue()) : 1;
    if (group == 1) {
      copies[grad] = copiesOf(update.getParam(), ArrayAttr());
      // An expert shard with dp = 1 (no reduction, or one over a group of
      // one): no replica holds it twice, so it is sharded already (over ep,
      // which the norm sums).
      if (norm &&
          !(norm.getSharded() && llvm::any_of(llvm::enumerate(norm.getGrads()), [&](auto e) {
              return e.value() == grad && (*norm.getSharded())[e.index()];
            })))
        return update.emitOpError() << "ZeRO: the gradient of '" << update.getParam()
                                    << "' is neither reduced nor an expert shard";
      continue;
    }
    for (Operation *user : reduce.getResult().getUsers())
      if (!isa<AdamWUpdateOp, GlobalNormOp>(user))
        return reduce.emitOpError()
               << "ZeRO: the reduced gradient of '" << update.getParam() << "' is read by "
               << user->getName() << ", which needs the whole tensor";
    Value &done = shards[grad];
    auto type = cast<RankedTensorType>(grad.getType());
    auto shardType =
        RankedTensorType::get({(type.getNumElements() + group - 1) / group}, type.getElementType());
    if (!done && reduce.getCodecAttr()) {
      // A codec reduces the whole tensor (its error feedback and warm-up
      // stay as they are): the shard is a slice of the result.
      b.setInsertionPointAfter(reduce);
      done = ShardSliceOp::create(b, reduce.getLoc(), shardType, grad, reduce.getAxesAttr())
                 .getResult();
    }
    if (!done) {
      Value input = reduce.getInput();
      if (stage >= 2 && input.getDefiningOp())
        b.setInsertionPointAfter(input.getDefiningOp());
      else if (stage >= 2)
        b.setInsertionPointToStart(input.getParentBlock());
      else
        b.setInsertionPoint(reduce);
      done = ReduceScatterOp::create(b, reduce.getLoc(), shardType, reduce.getReductionAttr(),
                                     input, reduce.getAxesAttr(), IntegerAttr(), CodecAttr(),
                                     reduce.getScaleAttr())
                 .getResult();
    }
    update.getGradMutable().assign(done);
    update.setShardAxesAttr(reduce.getAxesAttr());
    copies[done] = copiesOf(update.getParam(), reduce.getAxesAttr());
    gathers.push_back({update.getParamAttr(), reduce.getAxesAttr()});
  }
  if (norm) {
    // Every operand is now a piece of a ZeRO shard, an expert block or a
    // tp slice: its squares are summed over the whole grid, a piece that
    // several ranks hold (tp's replicated weights) counting 1/copies.
    for (OpOperand &operand : norm->getOpOperands())
      if (Value s = shards.lookup(operand.get()))
        operand.set(s);
    norm.setShardedAttr(b.getDenseBoolArrayAttr(SmallVector<bool>(norm.getGrads().size(), true)));
    norm.setShardAxesAttr(everyAxis);
    SmallVector<int64_t> counts;
    for (Value grad : norm.getGrads())
      counts.push_back(copies.lookup(grad) ? copies.lookup(grad) : 1);
    if (llvm::any_of(counts, [](int64_t n) { return n > 1; }))
      norm.setShardCopiesAttr(b.getDenseI64ArrayAttr(counts));
    else
      norm.removeShardCopiesAttr();
  }
  for (auto &[grad, shard] : shards)
    if (auto reduce = grad.getDefiningOp<AllReduceOp>(); reduce && reduce->use_empty())
      reduce->erase();
  // The parameters come back together after the last update, those of one
  // group together (one collective in the step program).
  llvm::stable_sort(gathers, [](auto &x, auto &y) { return x.second.size() > y.second.size(); });
  b.setInsertionPointAfter(updates.back());
  for (auto &[param, axes] : gathers)
    GatherParamOp::create(b, fn.getLoc(), param, axes);
  return success();
}

struct ShardOptimizerPass : public moe::impl::ShardOptimizerPassBase<ShardOptimizerPass> {
  using ShardOptimizerPassBase::ShardOptimizerPassBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t stage = this->stage;
    if (stage == -1) {
      // The planner's choice (moe-plan-sharding's zero_stage), else off.
      auto plan = module->getAttrOfType<PlanAttr>(MoEDialect::kPlanAttrName);
      stage = plan ? plan.getZeroStage() : 0;
    }
    if (stage == 0)
      return;
    if (stage != 1 && stage != 2) {
      module.emitError() << "moe-shard-optimizer: stage must be -1, 0, 1 or 2, got " << stage;
      return signalPassFailure();
    }
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    if (!grid || grid.getDp() * grid.getEp() == 1)
      return; // one replica: nothing to shard
    OpBuilder b(module.getContext());
    SmallVector<StringRef> axes;
    if (grid.getDp() > 1)
      axes.push_back("dp");
    if (grid.getEp() > 1)
      axes.push_back("ep");
    if (grid.getTp() > 1)
      axes.push_back("tp");
    for (auto fn : module.getOps<func::FuncOp>())
      if (!fn.isExternal() && failed(shard(fn, b.getStrArrayAttr(axes), stage)))
        return signalPassFailure();
  }
};

} // namespace
