//===- LowerToKernels.cpp - the moe-lower-to-kernels pass -----------------===//

#include "BufferPlan.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::moe {
#define GEN_PASS_DEF_LOWERTOKERNELSPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

bool isKernelOp(Operation *op) {
  return isa<MoEDialect>(op->getDialect()) &&
         !isa<GetParamOp, FillOp, ParamOp, KernelOp, LaunchOp, AllReduceOp, ReduceScatterOp,
              AllGatherOp, AllToAllOp, ReplicaSumOp, BalanceBiasOp, WaitOp, GatherParamOp,
              ShardSliceOp>(op);
}

/// The gradient op of an FFN forward `op` in the same block: same input,
/// weights and (expert FFNs) routed rows, since a routed forward leaves the
/// unrouted rows of its saved pre-activations unwritten. Null when the step
/// does not differentiate it. `before` orders two ops of the block.
Operation *gradientOf(Operation *op, function_ref<bool(Operation *, Operation *)> before) {
  Value x = op->getOperand(0);
  for (Operation *user : x.getUsers()) {
    if (user->getBlock() != op->getBlock() || !before(op, user))
      continue;
    bool matches = false;
    if (auto g = dyn_cast<FFNGradOp>(user); g && isa<FFNOp>(op)) {
      auto f = cast<FFNOp>(op);
      matches = g.getX() == x && g.getWUp() == f.getWUp() && g.getWDown() == f.getWDown() &&
                g.getWGate() == f.getWGate();
    } else if (auto g = dyn_cast<ExpertFFNGradOp>(user); g && isa<ExpertFFNOp>(op)) {
      auto f = cast<ExpertFFNOp>(op);
      matches = g.getX() == x && g.getWUp() == f.getWUp() && g.getWDown() == f.getWDown() &&
                g.getWGate() == f.getWGate() && g.getRows() == f.getRows();
    }
    if (matches)
      return user;
  }
  return nullptr;
}

class Lowering {
public:
  Lowering(ModuleOp module, bool savePreactivations, int64_t alignment, bool deviceNorm)
      : module(module), builder(module), savePreactivations(savePreactivations),
        alignment(alignment), deviceNorm(deviceNorm) {}

  LogicalResult lowerFunction(func::FuncOp fn);
  void planFunction(func::FuncOp fn);
  void finish();

private:
  FlatSymbolRefAttr kernelFor(Location loc, StringRef family, FunctionType signature,
                              DictionaryAttr config, ArrayRef<StringRef> epilogue);

  ModuleOp module;
  OpBuilder builder;
  llvm::StringMap<FlatSymbolRefAttr> kernels;
  llvm::StringMap<unsigned> familyCount;
  BufferPeaks peaks;
  int64_t numLaunches = 0;
  bool savePreactivations;
  int64_t alignment;
  bool deviceNorm;
  /// With deviceNorm: the moe.sum_squares of each global norm's gradients,
  /// and (once lowered) their launches' results.
  DenseMap<Operation *, Operation *> normOf;
  DenseMap<Operation *, SmallVector<Value>> partials;
  /// Gradient op -> the pre-activations its forward launch saved.
  DenseMap<Operation *, SmallVector<Value>> saved;
};

FlatSymbolRefAttr Lowering::kernelFor(Location loc, StringRef family, FunctionType signature,
                                      DictionaryAttr config, ArrayRef<StringRef> epilogue) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << family << "|" << signature << "|" << config << "|";
  llvm::interleave(epilogue, os, ",");
  auto it = kernels.find(key);
  if (it != kernels.end())
    return it->second;
  std::string name = (family + "_" + std::to_string(familyCount[family]++)).str();
  OpBuilder top = OpBuilder::atBlockBegin(module.getBody());
  // After the parameters, before the functions.
  for (Operation &op : *module.getBody())
    if (isa<ParamOp, KernelOp>(op))
      top.setInsertionPointAfter(&op);
  KernelOp::create(top, loc, name, family, signature, config, top.getStrArrayAttr(epilogue));
  auto ref = FlatSymbolRefAttr::get(builder.getContext(), name);
  kernels[key] = ref;
  return ref;
}

LogicalResult Lowering::lowerFunction(func::FuncOp fn) {
  if (!fn.getBody().hasOneBlock())
    return fn.emitOpError("has control flow; moe-lower-to-kernels lowers "
                          "single-block step functions");
  if (deviceNorm)
    for (auto norm : llvm::make_early_inc_range(fn.getOps<GlobalNormOp>())) {
      builder.setInsertionPoint(norm);
      std::optional<ArrayRef<int64_t>> layers = norm.getShardLayers();
      for (auto [i, g] : llvm::enumerate(norm.getGrads())) {
        auto type = cast<RankedTensorType>(g.getType());
        if (!type.getElementType().isF32())
          return norm.emitOpError("device-norm: gradient #") << i << " is not f32";
        // A placed expert tensor's rows count separately (replicas).
        int64_t rows = layers && (*layers)[i] >= 0 ? type.getShape()[0] : 1;
        int64_t row = type.getNumElements() / rows, per = 1;
        for (int64_t c = std::min<int64_t>(row, 256); c > 1; --c)
          if (row % c == 0) {
            per = c;
            break;
          }
        auto result = RankedTensorType::get({rows, row / per}, builder.getF32Type());
        normOf[SumSquaresOp::create(builder, norm.getLoc(), result, g)] = norm;
      }
    }
  SmallVector<Operation *> ops;
  for (Operation &op : fn.getBody().front().without_terminator()) {
    if (!isa<MoEDialect>(op.getDialect()))
      return op.emitOpError() << "cannot be lowered to a kernel (moe-lower-to-kernels handles "
                                 "moe ops only)";
    if (isKernelOp(&op))
      ops.push_back(&op);
  }
  // Block order from before the lowering: a launch inserted next to the op
  // it replaces would make isBeforeInBlock renumber the block on the next
  // query, once per op (quadratic in the layers). Ops missing here are
  // launches made for earlier ops, so they come before every op still to
  // lower.
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(fn.getBody().front()))
    position[&op] = static_cast<int64_t>(i);
  auto before = [&](Operation *a, Operation *b) {
    auto pa = position.find(a), pb = position.find(b);
    if (pa == position.end())
      return pb != position.end();
    return pb != position.end() && pa->second < pb->second;
  };
  DenseSet<Operation *> fused;
  for (Operation *op : ops) {
    if (fused.contains(op))
      continue;
    builder.setInsertionPoint(op);
    SmallVector<Value> operands(op->getOperands());
    SmallVector<Type> results(op->getResultTypes());
    SmallVector<StringRef> epilogue;
    Operation *last = op;
    // linear + residual add -> one launch with an epilogue.
    if (auto linear = dyn_cast<LinearOp>(op))
      if (linear->hasOneUse())
        if (auto add = dyn_cast<AddOp>(*linear->user_begin());
            add && add->getBlock() == linear->getBlock()) {
          Value residual = add.getLhs() == linear.getResult() ? add.getRhs() : add.getLhs();
          if (residual.getType() == linear.getType() &&
              (!residual.getDefiningOp() || before(residual.getDefiningOp(), linear))) {
            operands.push_back(residual);
            epilogue.push_back("residual_add");
            fused.insert(add);
            last = add;
          }
        }
    // FFN forward and backward share the pre-activations.
    Operation *gradient = nullptr;
    unsigned numPre = 0;
    if (savePreactivations && isa<FFNOp, ExpertFFNOp>(op)) {
      gradient = gradientOf(op, before);
      if (gradient) {
        auto x = cast<RankedTensorType>(op->getOperand(0).getType());
        auto up = cast<RankedTensorType>(op->getOperand(1).getType());
        SmallVector<int64_t> shape(x.getShape());
        shape.back() = up.getShape().back();
        Value gate = isa<FFNOp>(op) ? cast<FFNOp>(op).getWGate() : cast<ExpertFFNOp>(op).getWGate();
        numPre = gate ? 2 : 1; // x W_up (, x W_gate)
        for (unsigned i = 0; i < numPre; ++i)
          results.push_back(RankedTensorType::get(shape, x.getElementType()));
        epilogue.push_back("save_preactivations");
      }
    }
    if (auto it = saved.find(op); it != saved.end()) {
      operands.append(it->second.begin(), it->second.end());
      epilogue.push_back("saved_preactivations");
    }
    StringRef family = op->getName().stripDialect();
    SmallVector<NamedAttribute> config;
    FlatSymbolRefAttr updates;
    ArrayAttr shardAxes;
    for (NamedAttribute attr : op->getAttrs()) {
      if (isa<AdamWUpdateOp>(op) && attr.getName() == "param") {
        updates = cast<FlatSymbolRefAttr>(attr.getValue());
        continue;
      }
      // Which shard a ZeRO update writes is the launch's, not the kernel's.
      if (isa<AdamWUpdateOp>(op) && attr.getName() == "shard_axes") {
        shardAxes = cast<ArrayAttr>(attr.getValue());
        continue;
      }
      // The bias's load rule is moe.balance_bias's, not the kernel's.
      if (attr.getName() == "bias_update_rate")
        continue;
      // Which optional operands are present shows in the signature.
      if (attr.getName() == "operandSegmentSizes")
        continue;
      // Group-limited routing at its default (1, every expert) is left out:
      // a model without expert groups keeps its kernel specs.
      if ((attr.getName() == "expert_groups" || attr.getName() == "topk_groups") &&
          cast<IntegerAttr>(attr.getValue()).getInt() == 1)
        continue;
      if (attr.getName() == "aux_per_sequence" && !cast<BoolAttr>(attr.getValue()).getValue())
        continue;
      config.push_back(attr);
    }
    // A device's global norm reads the partial sums of squares.
    if (auto it = partials.find(op); it != partials.end())
      operands.append(it->second.begin(), it->second.end());
    auto signature = builder.getFunctionType(TypeRange(operands), results);
    FlatSymbolRefAttr kernel =
        kernelFor(op->getLoc(), family, signature, builder.getDictionaryAttr(config), epilogue);
    auto launch =
        LaunchOp::create(builder, last->getLoc(), results, kernel, operands,
                         builder.getDenseI64ArrayAttr(SmallVector<int64_t>(3 * results.size(), 0)),
                         updates, shardAxes);
    if (gradient)
      saved[gradient] = SmallVector<Value>(launch.getResults().take_back(numPre));
    if (auto it = normOf.find(op); it != normOf.end())
      partials[it->second].push_back(launch.getResult(0));
    // Erased ops leave the order: a later op may reuse their memory.
    if (last != op) {
      last->replaceAllUsesWith(launch);
      position.erase(last);
      last->erase();
    } else {
      op->replaceAllUsesWith(launch.getResults().take_front(op->getNumResults()));
    }
    if (last != op || op->use_empty()) {
      position.erase(op);
      op->erase();
    }
    ++numLaunches;
  }
  return success();
}

void Lowering::planFunction(func::FuncOp fn) { planBuffers(fn, peaks, alignment); }

void Lowering::finish() {
  int64_t paramBytes = 0;
  for (ParamOp p : module.getOps<ParamOp>())
    paramBytes += tensorBytes(p.getType());
  int64_t total = peaks.activation + peaks.gradient + paramBytes + peaks.state;
  module->setAttr(MoEDialect::kBufferPlanAttrName,
                  BufferPlanAttr::get(module.getContext(), peaks.activation, peaks.gradient,
                                      paramBytes, peaks.state, total,
                                      static_cast<int64_t>(kernels.size()), numLaunches,
                                      alignment));
}

struct LowerToKernelsPass : public moe::impl::LowerToKernelsPassBase<LowerToKernelsPass> {
  using LowerToKernelsPassBase::LowerToKernelsPassBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (alignment < 1 || (alignment & (alignment - 1))) {
      module.emitError("moe-lower-to-kernels: alignment ")
          << alignment.getValue() << " is not a power of two";
      return signalPassFailure();
    }
    Lowering lowering(module, savePreactivations, alignment, deviceNorm);
    SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
    for (func::FuncOp fn : fns) {
      if (fn.isExternal())
        continue;
      if (failed(lowering.lowerFunction(fn)))
        return signalPassFailure();
      lowering.planFunction(fn);
    }
    lowering.finish();
  }
};

} // namespace
