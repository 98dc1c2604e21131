//===- LowerToKernels.cpp - the moe-lower-to-kernels pass -----------------===//

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

constexpr int64_t kAlignment = 64;

/// Bytes of a tensor value.
int64_t bytesOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  int64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  return tensor.getNumElements() * std::max<int64_t>(bits / 8, 1);
}

bool isKernelOp(Operation *op) {
  return isa<MoEDialect>(op->getDialect()) &&
         !isa<GetParamOp, FillOp, ParamOp, KernelOp, LaunchOp, AllReduceOp, ReduceScatterOp,
              AllGatherOp, AllToAllOp, ReplicaSumOp, BalanceBiasOp>(op);
}

/// One tensor of the plan.
struct Buffer {
  Value value;
  int64_t bytes, first, last, arena, offset = -1;
};

/// Greedy-by-size placement: largest first, lowest aligned offset that
/// overlaps no placed buffer with an intersecting lifetime. Returns the peak.
int64_t place(SmallVectorImpl<Buffer *> &buffers) {
  llvm::stable_sort(buffers, [](Buffer *a, Buffer *b) { return a->bytes > b->bytes; });
  SmallVector<Buffer *> placed;
  int64_t peak = 0;
  for (Buffer *b : buffers) {
    SmallVector<std::pair<int64_t, int64_t>> busy;
    for (Buffer *p : placed)
      if (p->first <= b->last && b->first <= p->last)
        busy.push_back({p->offset, p->offset + p->bytes});
    llvm::sort(busy);
    int64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + b->bytes <= lo)
        break;
      offset = std::max(offset, (hi + kAlignment - 1) / kAlignment * kAlignment);
    }
    b->offset = offset;
    peak = std::max(peak, offset + b->bytes);
    placed.push_back(b);
  }
  return peak;
}

/// The gradient op of an FFN forward `op` in the same block: same input and
/// weights. Null when the step does not differentiate it.
Operation *gradientOf(Operation *op) {
  Value x = op->getOperand(0);
  for (Operation *user : x.getUsers()) {
    if (user->getBlock() != op->getBlock() || !op->isBeforeInBlock(user))
      continue;
    bool matches = false;
    if (auto g = dyn_cast<FFNGradOp>(user); g && isa<FFNOp>(op)) {
      auto f = cast<FFNOp>(op);
      matches = g.getX() == x && g.getWUp() == f.getWUp() && g.getWDown() == f.getWDown() &&
                g.getWGate() == f.getWGate();
    } else if (auto g = dyn_cast<ExpertFFNGradOp>(user); g && isa<ExpertFFNOp>(op)) {
      auto f = cast<ExpertFFNOp>(op);
      matches = g.getX() == x && g.getWUp() == f.getWUp() && g.getWDown() == f.getWDown() &&
                g.getWGate() == f.getWGate();
    }
    if (matches)
      return user;
  }
  return nullptr;
}

class Lowering {
public:
  Lowering(ModuleOp module, bool savePreactivations)
      : module(module), builder(module), savePreactivations(savePreactivations) {}

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
  int64_t activationPeak = 0, gradientPeak = 0, stateBytes = 0;
  int64_t numLaunches = 0;
  bool savePreactivations;
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
  SmallVector<Operation *> ops;
  for (Operation &op : fn.getBody().front().without_terminator()) {
    if (!isa<MoEDialect>(op.getDialect()))
      return op.emitOpError() << "cannot be lowered to a kernel (moe-lower-to-kernels handles "
                                 "moe ops only)";
    if (isKernelOp(&op))
      ops.push_back(&op);
  }
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
              (!residual.getDefiningOp() || residual.getDefiningOp()->isBeforeInBlock(linear))) {
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
      gradient = gradientOf(op);
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
    for (NamedAttribute attr : op->getAttrs()) {
      if (isa<AdamWUpdateOp>(op) && attr.getName() == "param") {
        updates = cast<FlatSymbolRefAttr>(attr.getValue());
        continue;
      }
      // The bias's load rule is moe.balance_bias's, not the kernel's.
      if (attr.getName() == "bias_update_rate")
        continue;
      // Which optional operands are present shows in the signature.
      if (attr.getName() == "operandSegmentSizes")
        continue;
      config.push_back(attr);
    }
    auto signature = builder.getFunctionType(TypeRange(operands), results);
    FlatSymbolRefAttr kernel =
        kernelFor(op->getLoc(), family, signature, builder.getDictionaryAttr(config), epilogue);
    auto launch = LaunchOp::create(
        builder, last->getLoc(), results, kernel, operands,
        builder.getDenseI64ArrayAttr(SmallVector<int64_t>(3 * results.size(), 0)), updates);
    if (gradient)
      saved[gradient] = SmallVector<Value>(launch.getResults().take_back(numPre));
    if (last != op) {
      last->replaceAllUsesWith(launch);
      last->erase();
    } else {
      op->replaceAllUsesWith(launch.getResults().take_front(op->getNumResults()));
    }
    if (last != op || op->use_empty())
      op->erase();
    ++numLaunches;
  }
  return success();
}

void Lowering::planFunction(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  DenseMap<Value, unsigned> index;
  std::vector<Buffer> buffers;
  DenseSet<Value> gradients;
  // Parameter gradients: consumed by optimiser launches or returned as such.
  for (Operation &op : body) {
    if (auto launch = dyn_cast<LaunchOp>(op); launch && launch.getUpdates())
      gradients.insert(launch.getOperands().front());
  }
  Operation *terminator = body.getTerminator();
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i)
    if (fn.getResultAttr(i, MoEDialect::kGradOfAttrName))
      gradients.insert(terminator->getOperand(i));

  auto add = [&](Value v, int64_t first) {
    int64_t bytes = bytesOf(v.getType());
    if (!bytes)
      return;
    index[v] = buffers.size();
    buffers.push_back({v, bytes, first, first, gradients.contains(v) ? 1 : 0});
  };
  for (BlockArgument arg : body.getArguments())
    add(arg, 0);
  int64_t position = 1;
  for (Operation &op : body) {
    for (Value operand : op.getOperands()) {
      auto it = index.find(operand);
      if (it != index.end())
        buffers[it->second].last = position;
    }
    if (!isa<GetParamOp>(op))
      for (Value result : op.getResults())
        add(result, position);
    ++position;
  }
  SmallVector<Buffer *> arenas[2];
  for (Buffer &b : buffers)
    arenas[b.arena].push_back(&b);
  activationPeak = std::max(activationPeak, place(arenas[0]));
  gradientPeak = std::max(gradientPeak, place(arenas[1]));

  for (Operation &op : body) {
    if (auto launch = dyn_cast<LaunchOp>(op); launch && launch.getUpdates())
      stateBytes +=
          2 * 4 * cast<RankedTensorType>(launch.getOperands().front().getType()).getNumElements();
    if (op.getNumResults() == 0 || isa<GetParamOp>(op))
      continue;
    SmallVector<int64_t> plan;
    for (Value result : op.getResults()) {
      auto it = index.find(result);
      if (it == index.end()) {
        plan.append({0, 0, 0});
        continue;
      }
      const Buffer &b = buffers[it->second];
      plan.append({b.arena, b.offset, b.bytes});
    }
    if (auto launch = dyn_cast<LaunchOp>(op))
      launch.setBuffers(plan);
    else
      op.setAttr(MoEDialect::kBuffersAttrName, builder.getDenseI64ArrayAttr(plan));
  }
}

void Lowering::finish() {
  int64_t paramBytes = 0;
  for (ParamOp p : module.getOps<ParamOp>())
    paramBytes += bytesOf(p.getType());
  int64_t total = activationPeak + gradientPeak + paramBytes + stateBytes;
  module->setAttr(
      MoEDialect::kBufferPlanAttrName,
      builder.getDictionaryAttr({
          builder.getNamedAttr("activation_bytes", builder.getI64IntegerAttr(activationPeak)),
          builder.getNamedAttr("gradient_bytes", builder.getI64IntegerAttr(gradientPeak)),
          builder.getNamedAttr("parameter_bytes", builder.getI64IntegerAttr(paramBytes)),
          builder.getNamedAttr("optimizer_state_bytes", builder.getI64IntegerAttr(stateBytes)),
          builder.getNamedAttr("total_bytes", builder.getI64IntegerAttr(total)),
          builder.getNamedAttr("num_kernels", builder.getI64IntegerAttr(kernels.size())),
          builder.getNamedAttr("num_launches", builder.getI64IntegerAttr(numLaunches)),
      }));
}

struct LowerToKernelsPass : public moe::impl::LowerToKernelsPassBase<LowerToKernelsPass> {
  using LowerToKernelsPassBase::LowerToKernelsPassBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Lowering lowering(module, savePreactivations);
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
