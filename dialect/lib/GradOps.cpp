//===- GradOps.cpp - verifiers of the backward ops ------------------------===//

#include "VerifyUtils.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::checks;

/// Checks that gradient `grad` (named `gradName`) has the type of `of`.
static LogicalResult checkGradType(Operation *op, StringRef gradName, Value grad, StringRef ofName,
                                   Value of) {
  if (!grad || !of || grad.getType() == of.getType())
    return success();
  return op->emitOpError() << gradName << " must have the type of " << ofName << " ("
                           << of.getType() << "), got " << grad.getType();
}

LogicalResult EmbeddingGradOp::verify() {
  if (failed(checkRank(*this, "dtable", getDtable(), 2, "[V, D]")))
    return failure();
  SmallVector<int64_t> expected(tensorType(getIds()).getShape());
  expected.push_back(tensorType(getDtable()).getShape()[1]);
  return checkShape(*this, "dy", getDy(), expected);
}

LogicalResult RMSNormGradOp::verify() {
  if (failed(checkGradType(*this, "dy", getDy(), "x", getX())) ||
      failed(checkGradType(*this, "dx", getDx(), "x", getX())) ||
      failed(checkGradType(*this, "dgamma", getDgamma(), "gamma", getGamma())) ||
      failed(checkRank(*this, "gamma", getGamma(), 1, "[G]")))
    return failure();
  int64_t last = tensorType(getX()).getShape().back(), group = tensorType(getGamma()).getShape()[0];
  if (group < 1 || last % group != 0)
    return emitOpError() << "gamma's size (" << group << ") must divide x's last dimension ("
                         << last << "): the groups normalised";
  return success();
}

LogicalResult ClampGradOp::verify() { return checkClampLimit(*this, getLimit().convertToFloat()); }

LogicalResult SigmoidGateGradOp::verify() {
  if (failed(checkGradType(*this, "dy", getDy(), "x", getX())) ||
      failed(checkGradType(*this, "dx", getDx(), "x", getX())) ||
      failed(checkGradType(*this, "dgate", getDgate(), "gate", getGate())))
    return failure();
  return checkSigmoidGate(*this, getX(), getGate());
}

LogicalResult AttentionGradOp::verify() {
  return failure(failed(checkGradType(*this, "dout", getDout(), "q", getQ())) ||
                 failed(checkGradType(*this, "dq", getDq(), "q", getQ())) ||
                 failed(checkGradType(*this, "dk", getDk(), "k", getK())) ||
                 failed(checkGradType(*this, "dv", getDv(), "v", getV())));
}

LogicalResult LatentAttentionGradOp::verify() {
  return checkLatentAttention(*this, getQ(), getK(), getKRope(), getV(), getNumHeads(),
                              getRopeTheta());
}

LogicalResult LinearGradOp::verify() {
  if (failed(checkRank(*this, "weight", getWeight(), 2, "[K, N]")))
    return failure();
  SmallVector<int64_t> expected(tensorType(getX()).getShape());
  if (expected.empty())
    return emitOpError("x must have rank >= 1");
  expected.back() = tensorType(getWeight()).getShape()[1];
  return failure(failed(checkShape(*this, "dy", getDy(), expected)) ||
                 failed(checkGradType(*this, "dx", getDx(), "x", getX())) ||
                 failed(checkGradType(*this, "dweight", getDweight(), "weight", getWeight())));
}

LogicalResult BiasGradOp::verify() {
  ArrayRef<int64_t> dy = tensorType(getDy()).getShape();
  if (dy.empty())
    return emitOpError("dy must have rank >= 1");
  return checkShape(*this, "dbias", getDbias(), {dy.back()});
}

/// Shared by ffn_grad and expert_ffn_grad.
template <typename OpT> static LogicalResult verifyFFNGrad(OpT op) {
  if (static_cast<bool>(op.getWGate()) != static_cast<bool>(op.getDwGate()))
    return op.emitOpError("dw_gate must be present exactly when w_gate is");
  return failure(failed(checkGradType(op, "dy", op.getDy(), "x", op.getX())) ||
                 failed(checkGradType(op, "dx", op.getDx(), "x", op.getX())) ||
                 failed(checkGradType(op, "dw_up", op.getDwUp(), "w_up", op.getWUp())) ||
                 failed(checkGradType(op, "dw_down", op.getDwDown(), "w_down", op.getWDown())) ||
                 failed(checkGradType(op, "dw_gate", op.getDwGate(), "w_gate", op.getWGate())));
}

LogicalResult FFNGradOp::verify() { return verifyFFNGrad(*this); }
LogicalResult ExpertFFNGradOp::verify() {
  return failure(failed(verifyFFNGrad(*this)) || failed(checkExpertRows(*this, getRows(), getX())));
}

LogicalResult RouterGradOp::verify() {
  ArrayRef<int64_t> x = tensorType(getX()).getShape();
  if (x.empty())
    return emitOpError("x must have rank >= 1");
  SmallVector<int64_t> choices(x.drop_back());
  choices.push_back(getTopK());
  int64_t experts =
      tensorType(getWeight()).getRank() == 2 ? tensorType(getWeight()).getShape()[1] : int64_t(1);
  return failure(
      failed(checkExpertGroups(*this, experts, getTopK(), getExpertGroups(), getTopkGroups())) ||
      failed(checkRoutingGroups(*this, getGroups(), getGroupSizesAttr(), getX())) ||
      failed(checkAuxPerSequence(*this, getAuxPerSequence(), getX())) ||
      failed(checkShape(*this, "dgates", getDgates(), choices)) ||
      failed(checkGradType(*this, "dx", getDx(), "x", getX())) ||
      failed(checkGradType(*this, "dweight", getDweight(), "weight", getWeight())));
}

LogicalResult DispatchGradOp::verify() {
  if (failed(checkRank(*this, "dbuf", getDbuf(), 3, "[E, C, D]")))
    return failure();
  SmallVector<int64_t> expected(tensorType(getExperts()).getShape());
  if (expected.empty())
    return emitOpError("experts must have rank >= 1");
  expected.back() = tensorType(getDbuf()).getShape()[2];
  return checkShape(*this, "dx", getDx(), expected);
}

LogicalResult CombineGradOp::verify() {
  SmallVector<int64_t> expected(tensorType(getGates()).getShape());
  if (expected.empty())
    return emitOpError("gates must have rank >= 1");
  if (tensorType(getY()).getRank() < 1)
    return emitOpError("y must have rank >= 1");
  expected.back() = tensorType(getY()).getShape().back();
  return failure(failed(checkShape(*this, "dout", getDout(), expected)) ||
                 failed(checkGradType(*this, "dy", getDy(), "y", getY())) ||
                 failed(checkGradType(*this, "dgates", getDgates(), "gates", getGates())));
}

LogicalResult CrossEntropyGradOp::verify() {
  return checkGradType(*this, "dlogits", getDlogits(), "logits", getLogits());
}
