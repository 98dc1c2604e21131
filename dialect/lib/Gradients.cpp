//===- Gradients.cpp - the gradient rule of every forward op --------------===//
//
// GradientOpInterface implementations: each forward op emits its backward
// op. Rules follow standard practice; docs/Autodiff.md states them.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::moe;

/// `grad`, or zeros of `type` when the result received no gradient (autodiff
/// asks an op when at least one of its results has one).
static Value orZero(OpBuilder &b, Location loc, Value grad, Type type);

LogicalResult EmbeddingOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  Value dtable =
      EmbeddingGradOp::create(b, getLoc(), getTable().getType(), getIds(), resultGrads[0]);
  operandGrads.assign({Value(), dtable});
  return success();
}

LogicalResult RMSNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  auto grad =
      RMSNormGradOp::create(b, getLoc(), getX(), getGamma(), resultGrads[0], getEpsilonAttr());
  operandGrads.assign({grad.getDx(), grad.getDgamma()});
  return success();
}

LogicalResult ClampOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign(
      {ClampGradOp::create(b, getLoc(), getX().getType(), getX(), resultGrads[0], getLimitAttr())});
  return success();
}

LogicalResult SigmoidGateOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  auto grad = SigmoidGateGradOp::create(b, getLoc(), getX(), getGate(), resultGrads[0]);
  operandGrads.assign({grad.getDx(), grad.getDgate()});
  return success();
}

LogicalResult AttentionOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  auto grad = AttentionGradOp::create(b, getLoc(), getQ().getType(), getK().getType(),
                                      getV().getType(), getQ(), getK(), getV(), resultGrads[0],
                                      getNumHeadsAttr(), getNumKvHeadsAttr(), getRopeThetaAttr());
  operandGrads.assign({grad.getDq(), grad.getDk(), grad.getDv()});
  return success();
}

LogicalResult LatentAttentionOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                               SmallVectorImpl<Value> &operandGrads) {
  auto grad = LatentAttentionGradOp::create(
      b, getLoc(), getQ().getType(), getK().getType(), getKRope().getType(), getV().getType(),
      getQ(), getK(), getKRope(), getV(), resultGrads[0], getNumHeadsAttr(), getRopeThetaAttr());
  operandGrads.assign({grad.getDq(), grad.getDk(), grad.getDkRope(), grad.getDv()});
  return success();
}

LogicalResult LinearOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  auto grad = LinearGradOp::create(b, getLoc(), getX(), getWeight(), resultGrads[0]);
  operandGrads.assign({grad.getDx(), grad.getDweight()});
  if (getBias())
    operandGrads.push_back(BiasGradOp::create(b, getLoc(), getBias().getType(), resultGrads[0]));
  return success();
}

LogicalResult AddOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign({resultGrads[0], resultGrads[0]});
  return success();
}

LogicalResult CastOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign({CastOp::create(b, getLoc(), getInput().getType(), resultGrads[0])});
  return success();
}

/// ffn and expert_ffn share their rule.
/// `extra`: the grad op's operands after the gate (the expert FFN's rows).
template <typename GradOpT, typename OpT, typename... Extra>
static void buildFFNGradient(OpT op, OpBuilder &b, Value dy, SmallVectorImpl<Value> &operandGrads,
                             Extra... extra) {
  Value gate = op.getWGate();
  SmallVector<Type> types = {op.getX().getType(), op.getWUp().getType(), op.getWDown().getType()};
  if (gate)
    types.push_back(gate.getType());
  auto grad = GradOpT::create(b, op.getLoc(), types, op.getActivationAttr(), op.getX(), op.getWUp(),
                              op.getWDown(), dy, gate, extra...);
  operandGrads.assign({grad.getDx(), grad.getDwUp(), grad.getDwDown()});
  if (gate)
    operandGrads.push_back(grad.getDwGate());
}

LogicalResult FFNOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  buildFFNGradient<FFNGradOp>(*this, b, resultGrads[0], operandGrads);
  return success();
}

LogicalResult ExpertFFNOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  buildFFNGradient<ExpertFFNGradOp>(*this, b, resultGrads[0], operandGrads, getRows());
  if (getRows())
    operandGrads.push_back(Value()); // routed-row counts: not differentiable
  return success();
}

LogicalResult RouterOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  // resultGrads: gates, experts (never), aux_loss.
  Value dgates = orZero(b, getLoc(), resultGrads[0], getGates().getType());
  Value daux = orZero(b, getLoc(), resultGrads[2], getAuxLoss().getType());
  auto grad = RouterGradOp::create(
      b, getLoc(), getX().getType(), getWeight().getType(), getScoringAttr(), getX(), getWeight(),
      dgates, daux, getBias(), getTopKAttr(), getRenormalizeAttr(), getAuxLossCoefAttr(),
      getZLossCoefAttr(), getRoutedScalingAttr(), /*groups=*/nullptr,
      /*group_sizes=*/nullptr, getExpertGroupsAttr(), getTopkGroupsAttr(), getAuxPerSequenceAttr());
  operandGrads.assign({grad.getDx(), grad.getDweight()});
  if (getBias())
    operandGrads.push_back(Value()); // the selection bias has no gradient
  return success();
}

LogicalResult DispatchOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  Value dx = DispatchGradOp::create(b, getLoc(), getX().getType(), resultGrads[0], getExperts());
  operandGrads.assign({dx, Value()});
  return success();
}

LogicalResult CombineOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  auto grad = CombineGradOp::create(b, getLoc(), getY().getType(), getGates().getType(), getY(),
                                    getGates(), getExperts(), resultGrads[0]);
  operandGrads.assign({grad.getDy(), grad.getDgates(), Value()});
  return success();
}

LogicalResult CrossEntropyOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  Value dlogits = CrossEntropyGradOp::create(b, getLoc(), getLogits(), getTargets(), resultGrads[0],
                                             getScale().convertToDouble());
  operandGrads.assign({dlogits, Value()});
  return success();
}

static Value orZero(OpBuilder &b, Location loc, Value grad, Type type) {
  if (grad)
    return grad;
  return FillOp::create(b, loc, type, b.getF64FloatAttr(0.0));
}
