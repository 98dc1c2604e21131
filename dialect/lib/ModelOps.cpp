//===- ModelOps.cpp - verifiers of the dense transformer ops --------------===//

#include "VerifyUtils.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::checks;

/// `shape` without its last dimension.
static SmallVector<int64_t> leading(ArrayRef<int64_t> shape) {
  return SmallVector<int64_t>(shape.drop_back());
}

LogicalResult EmbeddingOp::verify() {
  if (failed(checkRank(*this, "table", getTable(), 2, "[V, D]")))
    return failure();
  SmallVector<int64_t> expected(tensorType(getIds()).getShape());
  expected.push_back(tensorType(getTable()).getShape()[1]);
  if (failed(checkShape(*this, "result", getResult(), expected)))
    return failure();
  return checkSameElementType(*this, {{"table", getTable()}, {"result", getResult()}});
}

LogicalResult RMSNormOp::verify() {
  RankedTensorType x = tensorType(getX());
  if (x.getRank() < 1)
    return emitOpError("x must have rank >= 1");
  if (failed(checkRank(*this, "gamma", getGamma(), 1, "[G]")) ||
      failed(checkSameElementType(*this, {{"x", getX()}, {"gamma", getGamma()}})))
    return failure();
  int64_t last = x.getShape().back(), group = tensorType(getGamma()).getShape()[0];
  if (group < 1 || last % group != 0)
    return emitOpError() << "gamma's size (" << group << ") must divide x's last dimension ("
                         << last << "): the groups normalised";
  if (!(getEpsilon().convertToFloat() > 0.0f))
    return emitOpError() << "epsilon must be > 0, got " << getEpsilon().convertToFloat();
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(checkRank(*this, "q", getQ(), 3, "[B, S, H * hd]")) ||
      failed(checkRank(*this, "k", getK(), 3, "[B, S, KV * hd]")) ||
      failed(checkRank(*this, "v", getV(), 3, "[B, S, KV * hd]")) ||
      failed(checkSameElementType(*this, {{"q", getQ()}, {"k", getK()}, {"v", getV()}})))
    return failure();
  int64_t heads = getNumHeads(), kvHeads = getNumKvHeads();
  if (heads < 1 || kvHeads < 1)
    return emitOpError() << "heads and kv_heads must be >= 1, got " << heads << " and " << kvHeads;
  if (heads % kvHeads != 0)
    return emitOpError() << "heads (" << heads << ") must be a multiple of kv_heads (" << kvHeads
                         << ")";
  ArrayRef<int64_t> q = tensorType(getQ()).getShape();
  if (q[2] % heads != 0)
    return emitOpError() << "q width " << q[2] << " is not divisible by heads (" << heads << ")";
  int64_t headDim = q[2] / heads;
  SmallVector<int64_t> kv = {q[0], q[1], kvHeads * headDim};
  if (failed(checkShape(*this, "k", getK(), kv)) || failed(checkShape(*this, "v", getV(), kv)))
    return failure();
  if (std::optional<APFloat> theta = getRopeTheta()) {
    if (!(theta->convertToFloat() > 0.0f))
      return emitOpError() << "rope_theta must be > 0, got " << theta->convertToFloat();
    if (headDim % 2 != 0)
      return emitOpError() << "rotary embeddings need an even head width, got " << headDim;
  }
  return success();
}

LogicalResult LatentAttentionOp::verify() {
  if (failed(checkLatentAttention(*this, getQ(), getK(), getKRope(), getV(), getNumHeads(),
                                  getRopeTheta())))
    return failure();
  return failure(failed(checkShape(*this, "result", getResult(), tensorType(getV()).getShape())) ||
                 failed(checkSameElementType(*this, {{"v", getV()}, {"result", getResult()}})));
}

LogicalResult LinearOp::verify() {
  if (failed(checkRank(*this, "weight", getWeight(), 2, "[K, N]")))
    return failure();
  ArrayRef<int64_t> x = tensorType(getX()).getShape();
  ArrayRef<int64_t> w = tensorType(getWeight()).getShape();
  if (x.empty())
    return emitOpError("x must have rank >= 1");
  if (x.back() != w[0])
    return emitOpError() << "x width " << x.back() << " does not match weight input dimension "
                         << w[0];
  SmallVector<int64_t> expected = leading(x);
  expected.push_back(w[1]);
  if (failed(checkShape(*this, "result", getResult(), expected)))
    return failure();
  if (getBias() && failed(checkShape(*this, "bias", getBias(), {w[1]})))
    return failure();
  return checkSameElementType(
      *this,
      {{"x", getX()}, {"weight", getWeight()}, {"bias", getBias()}, {"result", getResult()}});
}

LogicalResult FFNOp::verify() {
  RankedTensorType x = tensorType(getX());
  if (x.getRank() < 1)
    return emitOpError("x must have rank >= 1");
  if (failed(verifyFFNWeights(*this, getActivation(), {}, x.getShape().back(), getWUp(), getWDown(),
                              getWGate())))
    return failure();
  return checkSameElementType(
      *this, {{"x", getX()}, {"w_up", getWUp()}, {"w_down", getWDown()}, {"w_gate", getWGate()}});
}

LogicalResult CrossEntropyOp::verify() {
  ArrayRef<int64_t> logits = tensorType(getLogits()).getShape();
  if (logits.size() < 2)
    return emitOpError() << "logits must have rank >= 2 ([..., V]), got rank " << logits.size();
  return checkShape(*this, "targets", getTargets(), leading(logits));
}

LogicalResult ClampOp::verify() { return checkClampLimit(*this, getLimit().convertToFloat()); }

LogicalResult SigmoidGateOp::verify() { return checkSigmoidGate(*this, getX(), getGate()); }

LogicalResult CastOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getResult());
  if (in.getShape() != out.getShape())
    return emitOpError() << "result must have the input's shape " << in << ", got " << out;
  if (in.getElementType() == out.getElementType())
    return emitOpError() << "converts " << in.getElementType() << " to itself";
  return success();
}

LogicalResult FillOp::verify() {
  if (!std::isfinite(getValue().convertToDouble()))
    return emitOpError("value must be finite");
  return success();
}
