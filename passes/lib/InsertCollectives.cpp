//===- InsertCollectives.cpp - the moe-insert-collectives pass ------------===//
//
// Gradient synchronisation of a partitioned step (after moe-autodiff; it
// also turns moe.tp_exit into its all_reduce and drops moe.tp_enter). The
// scaling rules are docs/Partitioning.md section 3: with N = dp * ep
// replicas and L = (1/N) sum_r L_r,
//   replicated parameter: all_reduce mean over [dp, ep];
//   expert shard:         all_reduce sum over [dp], scale 1/N, then, when
//                         its layer's placement has room for replicas
//                         (more positions than experts), replica_sum
//                         over [ep] (each replica computed part of the
//                         expert's tokens)
// and the selection biases' load rule (moe.balance_bias) sums the expert
// loads of [dp, ep]
// (its gradient already sums the ep group's tokens through the backward
// all_to_all, so a mean over dp alone would be ep times too large).
//
//===----------------------------------------------------------------------===//

#include "ShardCopies.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include <algorithm>
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_INSERTCOLLECTIVESPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct Sync {
  ArrayAttr replicaAxes; ///< [dp, ep] without degree-1 axes (empty: one replica)
  ArrayAttr dpAxes, epAxes;
  double shardScale; ///< 1 / (dp * ep)
  GridAttr grid;
};

/// Tensor parallelism after moe-autodiff: moe.tp_enter is the identity
/// forward (its gradient rule made the backward's sum), moe.tp_exit the
/// forward's all_reduce sum.
void lowerTensorParallel(func::FuncOp fn) {
  fn.walk([](Operation *op) {
    if (auto enter = dyn_cast<TpEnterOp>(op)) {
      enter.getResult().replaceAllUsesWith(enter.getInput());
      enter.erase();
    } else if (auto exit = dyn_cast<TpExitOp>(op)) {
      OpBuilder b(exit);
      Value sum = AllReduceOp::create(
          b, exit.getLoc(), exit.getType(), ReductionAttr::get(b.getContext(), Reduction::sum),
          exit.getInput(), exit.getAxesAttr(), CodecAttr(), b.getF64FloatAttr(1.0));
      exit.getResult().replaceAllUsesWith(sum);
      exit.erase();
    }
  });
}

/// The synchronised gradient of `param`, reduced right after `grad` is
/// final (before its first use). `replicaLayer` >= 0: the MoE layer whose
/// placement may hold the shard's rows at several positions.
Value synchronise(OpBuilder &b, Location loc, Value grad, bool sharded, const Sync &s,
                  int64_t replicaLayer = -1) {
  if (sharded) {
    Value sum = AllReduceOp::create(b, loc, grad.getType(),
                                    ReductionAttr::get(b.getContext(), Reduction::sum), grad,
                                    s.dpAxes, CodecAttr(), b.getF64FloatAttr(s.shardScale))
                    .getResult();
    if (replicaLayer < 0)
      return sum;
    return ReplicaSumOp::create(b, loc, sum.getType(), sum, s.epAxes,
                                b.getI64IntegerAttr(replicaLayer))
        .getResult();
  }
  if (s.replicaAxes.empty())
    return grad; // one data replica (tp ranks only): nothing to average
  return AllReduceOp::create(b, loc, grad.getType(),
                             ReductionAttr::get(b.getContext(), Reduction::mean), grad,
                             s.replicaAxes, CodecAttr(), b.getF64FloatAttr(1.0))
      .getResult();
}

LogicalResult run(ModuleOp module, func::FuncOp fn, const Sync &s) {
  lowerTensorParallel(fn);
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  auto isSharded = [&](StringRef name) {
    auto param = module.lookupSymbol<ParamOp>(name);
    return param && param->hasAttr(MoEDialect::kShardAttrName);
  };
  auto isTpSlice = [&](StringRef name) {
    auto param = module.lookupSymbol<ParamOp>(name);
    return param && param->hasAttr(MoEDialect::kTpDimAttrName);
  };
  // MoE layers whose placement has more positions than experts: room for
  // replicas (now or after online rebalancing).
  DenseSet<int64_t> replicable;
  for (PlaceSlotsOp place : fn.getOps<PlaceSlotsOp>())
    if (auto layer = place.getLayerAttr();
        layer &&
        place.getOrder().size() >
            static_cast<size_t>(cast<RankedTensorType>(place.getCounts().getType()).getShape()[0]))
      replicable.insert(layer.getInt());
  auto replicaLayer = [&](StringRef name) -> int64_t {
    auto param = module.lookupSymbol<ParamOp>(name);
    auto layer =
        param ? param->getAttrOfType<IntegerAttr>(MoEDialect::kShardLayerAttrName) : IntegerAttr();
    return layer && replicable.contains(layer.getInt()) ? layer.getInt() : -1;
  };
  // Gradients consumed by optimiser updates: reduce them before the
  // clipping norm (their first user).
  SmallVector<AdamWUpdateOp> updates(fn.getOps<AdamWUpdateOp>());
  GlobalNormOp norm;
  for (GlobalNormOp n : fn.getOps<GlobalNormOp>())
    norm = n;
  DenseMap<Value, Value> synced;
  SmallVector<bool> shardedOperands;
  if (norm)
    b.setInsertionPoint(norm);
  // Replicated parameters' reductions first, then the expert shards': each
  // kind is one run of equal collectives, which the step program sends as
  // one bucket.
  std::stable_partition(updates.begin(), updates.end(),
                        [&](AdamWUpdateOp u) { return !isSharded(u.getParam()); });
  for (AdamWUpdateOp update : updates) {
    Value grad = update.getGrad();
    bool sharded = isSharded(update.getParam());
    Value &done = synced[grad];
    if (!done) {
      if (!norm)
        b.setInsertionPoint(update);
      done = synchronise(b, update.getLoc(), grad, sharded, s, replicaLayer(update.getParam()));
    }
    update.getGradMutable().assign(done);
  }
  // The replica sums after every all_reduce: each kind stays one run (one
  // bucket for moe-bucket-gradients).
  if (norm)
    for (ReplicaSumOp sum : llvm::to_vector(fn.getOps<ReplicaSumOp>()))
      sum->moveBefore(norm);
  if (norm) {
    // The shard group: [ep], and tp with tensor parallelism.
    SmallVector<StringRef> axes;
    if (s.grid.getEp() > 1)
      axes.push_back("ep");
    if (s.grid.getTp() > 1)
      axes.push_back("tp");
    ArrayAttr normAxes = b.getStrArrayAttr(axes);
    SmallVector<int64_t> layers, copies;
    for (OpOperand &operand : norm->getOpOperands()) {
      Value grad = operand.get();
      bool sharded = false, tpSlice = false;
      int64_t layer = -1;
      StringRef param;
      for (AdamWUpdateOp update : updates)
        if (update.getGrad() == synced.lookup(grad)) {
          param = update.getParam();
          sharded = isSharded(param);
          tpSlice = isTpSlice(param);
          layer = replicaLayer(param);
        }
      // With tp, the shard group is [ep, tp]: a slice tp splits but ep does
      // not is on every ep rank of its replica, an expert block tp does not
      // split on every tp rank.
      shardedOperands.push_back(sharded || tpSlice);
      copies.push_back(sharded || tpSlice
                           ? shardCopies(module.lookupSymbol<ParamOp>(param), s.grid, normAxes)
                           : 1);
      layers.push_back(layer);
      if (Value done = synced.lookup(grad))
        operand.set(done);
      else
        return norm.emitOpError("a gradient of the norm updates no parameter");
    }
    if (llvm::is_contained(shardedOperands, true)) {
      norm.setShardedAttr(b.getDenseBoolArrayAttr(shardedOperands));
      norm.setShardAxesAttr(normAxes);
      if (s.grid.getTp() > 1 && llvm::any_of(copies, [](int64_t n) { return n > 1; }))
        norm.setShardCopiesAttr(b.getDenseI64ArrayAttr(copies));
      if (llvm::any_of(layers, [](int64_t l) { return l >= 0; }))
        norm.setShardLayersAttr(b.getDenseI64ArrayAttr(layers));
    }
  }
  // The selection biases' load rule counts every replica's routing.
  for (BalanceBiasOp balance : fn.getOps<BalanceBiasOp>())
    balance.setSumAxesAttr(s.replicaAxes);
  // Without an optimiser the step returns gradients: reduce those, and the
  // loss in every case.
  b.setInsertionPoint(ret);
  for (OpOperand &operand : ret->getOpOperands()) {
    unsigned i = operand.getOperandNumber();
    if (i == 0) {
      if (s.replicaAxes.empty())
        continue; // tp ranks compute the same loss
      operand.set(AllReduceOp::create(b, ret.getLoc(), operand.get().getType(),
                                      ReductionAttr::get(b.getContext(), Reduction::mean),
                                      operand.get(), s.replicaAxes, CodecAttr(),
                                      b.getF64FloatAttr(1.0)));
    } else if (auto of =
                   fn.getResultAttrOfType<FlatSymbolRefAttr>(i, MoEDialect::kGradOfAttrName)) {
      operand.set(synchronise(b, ret.getLoc(), operand.get(), isSharded(of.getValue()), s,
                              replicaLayer(of.getValue())));
    }
  }
  return success();
}

struct InsertCollectivesPass : public moe::impl::InsertCollectivesPassBase<InsertCollectivesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    if (!grid || grid.getNumRanks() == 1)
      return;
    OpBuilder b(module.getContext());
    SmallVector<StringRef> replica;
    if (grid.getDp() > 1)
      replica.push_back("dp");
    if (grid.getEp() > 1)
      replica.push_back("ep");
    Sync s{b.getStrArrayAttr(replica), b.getStrArrayAttr({"dp"}), b.getStrArrayAttr({"ep"}),
           1.0 / static_cast<double>(grid.getDp() * grid.getEp()), grid};
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal() || fn.getNumResults() == 0)
        continue;
      if (failed(run(module, fn, s)))
        return signalPassFailure();
    }
  }
};

} // namespace
