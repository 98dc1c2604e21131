//===- Autodiff.cpp - the moe-autodiff pass -------------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::moe {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The step function's loss: the single tensor<f32> its return yields.
bool isTrainStep(func::FuncOp fn) {
  if (fn.isExternal() || fn.getNumResults() != 1 || fn->hasAttr(MoEDialect::kNoGradAttrName))
    return false;
  auto type = dyn_cast<RankedTensorType>(fn.getResultTypes()[0]);
  return type && type.getRank() == 0 && type.getElementType().isF32();
}

/// Builds the backward graph of one step function.
class Differentiator {
public:
  Differentiator(func::FuncOp fn, bool withOptimizer)
      : fn(fn), builder(fn.getContext()), withOptimizer(withOptimizer) {}

  LogicalResult run();

private:
  void accumulate(Value value, Value grad) {
    auto [it, inserted] = grads.try_emplace(value, grad);
    if (!inserted)
      it->second = AddOp::create(builder, grad.getLoc(), it->second, grad);
  }

  /// Appends lr schedule, clipping and AdamW updates; returns the loss only.
  LogicalResult appendOptimizer(Location loc, Value loss,
                                ArrayRef<std::pair<ParamOp, Value>> updates);

  func::FuncOp fn;
  OpBuilder builder;
  bool withOptimizer;
  DenseMap<Value, Value> grads;
  /// Parameter name -> accumulated gradient.
  llvm::MapVector<StringAttr, Value> paramGrads;
};

LogicalResult Differentiator::run() {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  builder.setInsertionPoint(ret);
  Value loss = ret.getOperand(0);
  auto seed = FillOp::create(builder, ret.getLoc(), loss.getType(), builder.getF64FloatAttr(1.0));
  seed->setAttr(MoEDialect::kLossSeedAttrName, builder.getUnitAttr());
  grads[loss] = seed;

  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value result : op->getResults()) {
      Value g = grads.lookup(result);
      resultGrads.push_back(g);
      any |= static_cast<bool>(g);
    }
    if (!any)
      continue;
    if (auto get = dyn_cast<GetParamOp>(op)) {
      StringAttr name = get.getNameAttr().getAttr();
      auto [it, inserted] = paramGrads.try_emplace(name, resultGrads[0]);
      if (!inserted)
        it->second = AddOp::create(builder, get.getLoc(), it->second, resultGrads[0]);
      continue;
    }
    auto differentiable = dyn_cast<GradientOpInterface>(op);
    if (!differentiable)
      return op->emitOpError() << "has no gradient rule, but its result reaches the loss "
                                  "(moe-autodiff)";
    SmallVector<Value> operandGrads;
    if (failed(differentiable.buildGradient(builder, resultGrads, operandGrads)))
      return failure();
    if (operandGrads.size() != op->getNumOperands())
      return op->emitOpError() << "gradient rule returned " << operandGrads.size()
                               << " gradients for " << op->getNumOperands() << " operands";
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (grad)
        accumulate(operand, grad);
  }

  // Parameter gradients in declaration order.
  auto module = fn->getParentOfType<ModuleOp>();
  SmallVector<std::pair<ParamOp, Value>> updates;
  for (ParamOp param : module.getOps<ParamOp>())
    if (Value g = paramGrads.lookup(param.getSymNameAttr()))
      updates.push_back({param, g});
  if (withOptimizer)
    return appendOptimizer(ret.getLoc(), loss, updates);

  SmallVector<Value> results = {loss};
  SmallVector<FlatSymbolRefAttr> names;
  for (auto [param, g] : updates) {
    results.push_back(g);
    names.push_back(FlatSymbolRefAttr::get(param.getSymNameAttr()));
  }
  func::ReturnOp::create(builder, ret.getLoc(), results);
  ret.erase();
  SmallVector<Type> types;
  for (Value v : results)
    types.push_back(v.getType());
  fn.setFunctionType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(), types));
  for (auto [i, name] : llvm::enumerate(names))
    fn.setResultAttr(i + 1, MoEDialect::kGradOfAttrName, name);
  return success();
}

/// A setting of the module's moe.optimizer dictionary, or `fallback`.
double setting(DictionaryAttr dict, StringRef key, double fallback) {
  if (!dict)
    return fallback;
  if (auto f = dict.getAs<FloatAttr>(key))
    return f.getValueAsDouble();
  if (auto i = dict.getAs<IntegerAttr>(key))
    return static_cast<double>(i.getInt());
  return fallback;
}

LogicalResult Differentiator::appendOptimizer(Location loc, Value loss,
                                              ArrayRef<std::pair<ParamOp, Value>> updates) {
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  if (updates.empty())
    return fn.emitError() << "moe-autodiff: no parameter of @" << fn.getSymName()
                          << " receives a gradient";
  auto dict = fn->getParentOfType<ModuleOp>()->getAttrOfType<DictionaryAttr>(
      MoEDialect::kOptimizerAttrName);
  auto i32 = RankedTensorType::get({}, builder.getI32Type());
  auto f32 = RankedTensorType::get({}, builder.getF32Type());
  unsigned index = fn.getNumArguments();
  if (failed(fn.insertArgument(index, i32,
                               builder.getDictionaryAttr(builder.getNamedAttr(
                                   MoEDialect::kInputAttrName, builder.getStringAttr("step"))),
                               loc)))
    return fn.emitError("moe-autodiff: cannot add the step argument");
  Value step = fn.getArgument(index);

  double lr = setting(dict, "lr", 3e-4);
  StringAttr schedule = dict ? dict.getAs<StringAttr>("schedule") : nullptr;
  Value rate = LRScheduleOp::create(
      builder, loc, f32, step, builder.getF64FloatAttr(lr),
      builder.getF64FloatAttr(setting(dict, "min_lr", std::min(3e-5, lr))),
      builder.getI64IntegerAttr(static_cast<int64_t>(setting(dict, "warmup_steps", 100))),
      builder.getI64IntegerAttr(static_cast<int64_t>(setting(dict, "total_steps", 1000))),
      schedule ? schedule : builder.getStringAttr("cosine"));
  SmallVector<Value> grads;
  for (auto &update : updates)
    grads.push_back(update.second);
  Value norm = GlobalNormOp::create(builder, loc, f32, grads);
  for (auto [param, grad] : updates) {
    double decay = param.getTensorType().getRank() >= 2 ? setting(dict, "weight_decay", 0.1) : 0.0;
    AdamWUpdateOp::create(
        builder, param.getLoc(), FlatSymbolRefAttr::get(param.getSymNameAttr()), grad, rate, norm,
        step, builder.getF64FloatAttr(setting(dict, "beta1", 0.9)),
        builder.getF64FloatAttr(setting(dict, "beta2", 0.95)),
        builder.getF64FloatAttr(setting(dict, "eps", 1e-8)), builder.getF64FloatAttr(decay),
        builder.getF64FloatAttr(setting(dict, "grad_clip", 1.0)), ArrayAttr());
  }
  // The routers' selection biases: DeepSeek-V3's load rule, after the
  // gradient updates (the next step routes with the new bias).
  SmallVector<Operation *> routers;
  for (Operation &op : fn.getBody().front())
    if (isa<RouterOp, FusedGateOp>(op))
      routers.push_back(&op);
  for (Operation *op : routers) {
    Value bias, experts;
    double rate = 0;
    if (auto router = dyn_cast<RouterOp>(*op)) {
      bias = router.getBias(), experts = router.getExperts(), rate = router.getBiasRate();
    } else {
      auto gate = cast<FusedGateOp>(*op);
      bias = gate.getBias(), experts = gate.getExperts(), rate = gate.getBiasRate();
    }
    if (!bias || rate == 0)
      continue;
    auto get = bias.getDefiningOp<GetParamOp>();
    if (!get)
      return op->emitOpError("a trained selection bias must come from moe.get_param (moe-autodiff "
                             "updates it by the load rule)");
    BalanceBiasOp::create(builder, op->getLoc(), get.getNameAttr(), experts,
                          builder.getF64FloatAttr(rate), ArrayAttr());
  }
  func::ReturnOp::create(builder, ret.getLoc(), loss);
  ret.erase();
  return success();
}

struct AutodiffPass : public moe::impl::AutodiffPassBase<AutodiffPass> {
  using AutodiffPassBase::AutodiffPassBase;

  void runOnOperation() override {
    if (optimizer != "adamw" && optimizer != "none") {
      mlir::emitError(getOperation().getLoc())
          << "moe-autodiff: unknown optimizer '" << optimizer << "' (expected adamw or none)";
      return signalPassFailure();
    }
    bool found = false;
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      if (!isTrainStep(fn))
        continue;
      found = true;
      if (failed(Differentiator(fn, optimizer == "adamw").run()))
        return signalPassFailure();
    }
    if (!found) {
      mlir::emitError(getOperation().getLoc())
          << "moe-autodiff: no step function (a func.func returning one "
             "tensor<f32> loss) in the module";
      signalPassFailure();
    }
  }
};

} // namespace
