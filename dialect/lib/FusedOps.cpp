//===- FusedOps.cpp - fused gating: verifiers and gradient rules ----------===//

#include "VerifyUtils.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::checks;

LogicalResult FusedGateOp::verify() {
  int64_t experts;
  SmallVector<int64_t> choices;
  if (failed(verifyRouting(*this, getX(), getWeight(), getBias(), getTopK(), getGates(),
                           getExperts(), experts, choices)))
    return failure();
  if (failed(checkAuxPerSequence(*this, getAuxPerSequence(), getX())))
    return failure();
  if (int64_t capacity = getCapacityAttr().getInt(); capacity < 1)
    return emitOpError() << "capacity must be >= 1, got " << capacity;
  if (failed(checkRoutingGroups(*this, getGroups(), getGroupSizesAttr(), getX())))
    return failure();
  return failure(failed(checkShape(*this, "slots", getSlots(), choices)) ||
                 failed(checkShape(*this, "counts", getCounts(), {experts})));
}

/// Slots [..., k] must carry the leading dimensions of tokens [..., D].
static LogicalResult checkSlotsOf(Operation *op, Value tokens, Value slots) {
  ArrayRef<int64_t> t = tensorType(tokens).getShape();
  ArrayRef<int64_t> s = tensorType(slots).getShape();
  if (t.empty() || s.empty() || t.drop_back() != s.drop_back())
    return op->emitOpError() << "slots (" << formatShape(s)
                             << ") must be [..., k] with the token dimensions of "
                             << formatShape(t);
  return success();
}

LogicalResult PermuteOp::verify() {
  if (failed(checkSlotsOf(*this, getX(), getSlots())) ||
      failed(checkRank(*this, "result", getResult(), 3, "[E, C, D]")))
    return failure();
  if (tensorType(getResult()).getShape()[2] != tensorType(getX()).getShape().back())
    return emitOpError("result width must equal x width");
  return checkSameElementType(*this, {{"x", getX()}, {"result", getResult()}});
}

LogicalResult UnpermuteOp::verify() {
  if (failed(checkRank(*this, "buf", getBuf(), 3, "[E, C, D]")) ||
      failed(checkSlotsOf(*this, getResult(), getSlots())))
    return failure();
  if (getWeights() &&
      failed(checkShape(*this, "weights", getWeights(), tensorType(getSlots()).getShape())))
    return failure();
  if (tensorType(getResult()).getShape().back() != tensorType(getBuf()).getShape()[2])
    return emitOpError("result width must equal the buffer width");
  return checkSameElementType(
      *this, {{"buf", getBuf()}, {"weights", getWeights()}, {"result", getResult()}});
}

LogicalResult UnpermuteGradOp::verify() {
  if (getDbuf().getType() != getBuf().getType() ||
      getDweights().getType() != getWeights().getType())
    return emitOpError("results must have the types of buf and weights");
  return success();
}

LogicalResult FusedGateOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  // Results: gates, experts, slots, counts, aux_loss; only gates and the
  // loss carry gradients, exactly as for moe.router.
  Value dgates =
      resultGrads[0]
          ? resultGrads[0]
          : FillOp::create(b, getLoc(), getGates().getType(), b.getF64FloatAttr(0.0)).getResult();
  Value daux =
      resultGrads[4]
          ? resultGrads[4]
          : FillOp::create(b, getLoc(), getAuxLoss().getType(), b.getF64FloatAttr(0.0)).getResult();
  auto grad = RouterGradOp::create(
      b, getLoc(), getX().getType(), getWeight().getType(), getScoringAttr(), getX(), getWeight(),
      dgates, daux, getBias(), getTopKAttr(), getRenormalizeAttr(), getAuxLossCoefAttr(),
      getZLossCoefAttr(), getRoutedScalingAttr(), getGroupsAttr(), getGroupSizesAttr(),
      getExpertGroupsAttr(), getTopkGroupsAttr(), getAuxPerSequenceAttr());
  operandGrads.assign({grad.getDx(), grad.getDweight()});
  if (getBias())
    operandGrads.push_back(Value());
  return success();
}

LogicalResult PermuteOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value dx =
      UnpermuteOp::create(b, getLoc(), getX().getType(), resultGrads[0], getSlots(), Value());
  operandGrads.assign({dx, Value()});
  return success();
}

LogicalResult UnpermuteOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (!getWeights()) {
    Value dbuf = PermuteOp::create(b, getLoc(), getBuf().getType(), resultGrads[0], getSlots());
    operandGrads.assign({dbuf, Value()});
    return success();
  }
  auto grad = UnpermuteGradOp::create(b, getLoc(), getBuf().getType(), getWeights().getType(),
                                      getBuf(), getSlots(), getWeights(), resultGrads[0]);
  operandGrads.assign({grad.getDbuf(), Value(), grad.getDweights()});
  return success();
}

LogicalResult PlaceSlotsOp::verify() {
  if (getResultSlots().getType() != getSlots().getType())
    return emitOpError("result_slots must have the type of slots");
  if (failed(checkRank(*this, "counts", getCounts(), 1, "[E]")) ||
      failed(checkRank(*this, "result_counts", getResultCounts(), 1, "[P]")))
    return failure();
  int64_t experts = tensorType(getCounts()).getShape()[0];
  int64_t positions = tensorType(getResultCounts()).getShape()[0];
  ArrayRef<int64_t> order = getOrder();
  if (static_cast<int64_t>(order.size()) != positions)
    return emitOpError() << "order has " << order.size() << " entries for " << positions
                         << " positions (result_counts)";
  std::vector<bool> seen(experts, false);
  for (int64_t e : order) {
    if (e < -1 || e >= experts)
      return emitOpError() << "order entries must be experts in [0, " << experts
                           << ") or -1 (empty), got " << e;
    if (e >= 0)
      seen[e] = true;
  }
  if (auto missing = llvm::find(seen, false); missing != seen.end())
    return emitOpError() << "order places no replica of expert " << (missing - seen.begin());
  if (int64_t block = getBlockAttr().getInt(); block < 1)
    return emitOpError() << "block must be >= 1, got " << block;
  if (getLayerAttr() && getLayerAttr().getInt() < 0)
    return emitOpError() << "layer must be >= 0, got " << getLayerAttr().getInt();
  if (static_cast<bool>(getChunksAttr()) != static_cast<bool>(getRanksAttr()))
    return emitOpError("chunks and ranks must come together");
  if (getChunksAttr()) {
    int64_t chunks = getChunksAttr().getInt(), ranks = getRanksAttr().getInt();
    if (chunks < 1 || ranks < 1 || positions % (chunks * ranks))
      return emitOpError() << "chunks (" << chunks << ") and ranks (" << ranks
                           << ") must be >= 1 with " << positions
                           << " positions divisible by their product";
  }
  return success();
}
