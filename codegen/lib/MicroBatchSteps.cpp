//===- MicroBatchSteps.cpp - what a micro-batched step runs once ----------===//

#include "MicroBatchSteps.h"

#include "moe/Dialect/MoE/MoEDialect.h"
#include "moe/Dialect/MoE/MoEOps.h"

using namespace mlir;
using namespace mlir::moe;
using namespace moec::codegen;

namespace {

/// Whether `v` lives in the gradient arena of the buffer plan.
bool inGradientArena(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return false;
  unsigned i = cast<OpResult>(v).getResultNumber();
  if (auto wait = dyn_cast<WaitOp>(def))
    return inGradientArena(wait.getInputs()[i]);
  if (auto chunk = dyn_cast<ChunkOp>(def))
    return inGradientArena(chunk.getInput());
  if (auto concat = dyn_cast<ConcatOp>(def))
    return inGradientArena(concat.getInputs().front());
  ArrayRef<int64_t> plan;
  if (auto launch = dyn_cast<LaunchOp>(def))
    plan = launch.getBuffers();
  else if (auto attr = def->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName))
    plan = attr.asArrayRef();
  return plan.size() >= 3 * (i + 1) && plan[3 * i] != 0;
}

/// Ops that start the once-per-step part: what reduces, slices or applies
/// a gradient (a collective reading or writing the gradient arena, which
/// holds what the optimiser reads: a reduction's result, or its input
/// when it reduces in place), and the learning rate.
bool startsOnce(Operation *op) {
  if (isa<GatherParamOp>(op))
    return true;
  if (isa<AllReduceOp, ReduceScatterOp, ReplicaSumOp, ShardSliceOp>(op))
    return inGradientArena(op->getOperand(0)) ||
           llvm::any_of(op->getResults(), [](Value r) { return inGradientArena(r); });
  if (auto launch = dyn_cast<LaunchOp>(op)) {
    if (launch.getUpdates())
      return true;
    auto kernel = op->getParentOfType<ModuleOp>().lookupSymbol<KernelOp>(launch.getKernelAttr());
    StringRef family = kernel ? kernel.getFamily() : StringRef();
    return family == "lr_schedule" || family == "global_norm" || family == "sum_squares";
  }
  return false;
}

} // namespace

FailureOr<MicroBatchSteps> MicroBatchSteps::analyse(func::FuncOp step) {
  MicroBatchSteps steps;
  Block &body = step.getBody().front();
  for (Operation &op : body) {
    bool readsOnce = llvm::any_of(op.getOperands(), [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def && steps.once.contains(def);
    });
    if (isa<func::ReturnOp, BalanceBiasOp>(op)) {
      if (readsOnce)
        return op.emitOpError("reads a value computed once per step, in the last micro-batch "
                              "(moec --micro-batches cannot run it)");
      continue;
    }
    if (readsOnce || startsOnce(&op))
      steps.once.insert(&op);
  }
  for (Operation &op : body) {
    if (!steps.once.contains(&op))
      continue;
    for (Value v : op.getOperands()) {
      Operation *def = v.getDefiningOp();
      if (!def || steps.once.contains(def) || isa<GetParamOp>(def) || steps.accumulated.count(v))
        continue;
      // A gradient: f32, read by the once part only (a reduction's input
      // lives in the activation arena, what the optimiser reads in the
      // gradient arena).
      auto type = cast<RankedTensorType>(v.getType());
      if (!type.getElementType().isF32() ||
          (!inGradientArena(v) &&
           !isa<AllReduceOp, ReduceScatterOp, ReplicaSumOp, ShardSliceOp>(&op)))
        return op.emitOpError("runs once per step (in the last micro-batch) but reads a value "
                              "each micro-batch computes that is not an f32 gradient (moec "
                              "--micro-batches cannot sum it)");
      for (Operation *user : v.getUsers())
        if (!steps.once.contains(user))
          return user->emitOpError("reads a gradient the optimiser's part of the step reads "
                                   "too; with --micro-batches it would see their mean in the "
                                   "last micro-batch");
      steps.accumulated[v] = steps.accumulatorFloats;
      steps.accumulatorFloats += type.getNumElements();
    }
  }
  return steps;
}
