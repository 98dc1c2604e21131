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
  if (fn.isExternal() || fn.getNumResults() != 1)
    return false;
  auto type = dyn_cast<RankedTensorType>(fn.getResultTypes()[0]);
  return type && type.getRank() == 0 && type.getElementType().isF32();
}

/// Builds the backward graph of one step function.
class Differentiator {
public:
  Differentiator(func::FuncOp fn) : fn(fn), builder(fn.getContext()) {}

  LogicalResult run();

private:
  void accumulate(Value value, Value grad) {
    auto [it, inserted] = grads.try_emplace(value, grad);
    if (!inserted)
      it->second = AddOp::create(builder, grad.getLoc(), it->second, grad);
  }

  func::FuncOp fn;
  OpBuilder builder;
  DenseMap<Value, Value> grads;
  /// Parameter name -> accumulated gradient.
  llvm::MapVector<StringAttr, Value> paramGrads;
};

LogicalResult Differentiator::run() {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  builder.setInsertionPoint(ret);
  Value loss = ret.getOperand(0);
  grads[loss] = FillOp::create(builder, ret.getLoc(), loss.getType(),
                               builder.getF64FloatAttr(1.0));

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
        it->second =
            AddOp::create(builder, get.getLoc(), it->second, resultGrads[0]);
      continue;
    }
    auto differentiable = dyn_cast<GradientOpInterface>(op);
    if (!differentiable)
      return op->emitOpError()
             << "has no gradient rule, but its result reaches the loss "
                "(moe-autodiff)";
    SmallVector<Value> operandGrads;
    if (failed(differentiable.buildGradient(builder, resultGrads,
                                            operandGrads)))
      return failure();
    if (operandGrads.size() != op->getNumOperands())
      return op->emitOpError() << "gradient rule returned "
                               << operandGrads.size() << " gradients for "
                               << op->getNumOperands() << " operands";
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (grad)
        accumulate(operand, grad);
  }

  // Return the loss and the parameter gradients, in declaration order.
  auto module = fn->getParentOfType<ModuleOp>();
  SmallVector<Value> results = {loss};
  SmallVector<FlatSymbolRefAttr> names;
  for (ParamOp param : module.getOps<ParamOp>()) {
    Value g = paramGrads.lookup(param.getSymNameAttr());
    if (!g)
      continue;
    results.push_back(g);
    names.push_back(FlatSymbolRefAttr::get(param.getSymNameAttr()));
  }
  func::ReturnOp::create(builder, ret.getLoc(), results);
  ret.erase();
  SmallVector<Type> types;
  for (Value v : results)
    types.push_back(v.getType());
  fn.setFunctionType(
      FunctionType::get(fn.getContext(), fn.getArgumentTypes(), types));
  for (auto [i, name] : llvm::enumerate(names))
    fn.setResultAttr(i + 1, "moe.grad_of", name);
  return success();
}

struct AutodiffPass : public moe::impl::AutodiffPassBase<AutodiffPass> {
  void runOnOperation() override {
    bool found = false;
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      if (!isTrainStep(fn))
        continue;
      found = true;
      if (failed(Differentiator(fn).run()))
        return signalPassFailure();
    }
    if (!found) {
      getOperation().emitError()
          << "moe-autodiff: no step function (a func.func returning one "
             "tensor<f32> loss) in the module";
      signalPassFailure();
    }
  }
};

} // namespace
