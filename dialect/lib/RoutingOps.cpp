//===- RoutingOps.cpp - router, dispatch, expert_ffn, combine -------------===//

#include "VerifyUtils.h"

#include "llvm/ADT/BitVector.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::checks;

/// `shape` with its last dimension replaced by `last`.
static SmallVector<int64_t> withLast(ArrayRef<int64_t> shape, int64_t last) {
  SmallVector<int64_t> out(shape.drop_back());
  out.push_back(last);
  return out;
}

/// Checks that an F32 coefficient is >= 0 (or > 0 when `strict`).
static LogicalResult checkCoefficient(Operation *op, StringRef name, float value, bool strict) {
  if (strict ? value > 0.0f : value >= 0.0f)
    return success();
  return op->emitOpError() << name << " must be " << (strict ? ">" : ">=") << " 0, got " << value;
}

LogicalResult RouterOp::verify() {
  int64_t experts;
  SmallVector<int64_t> choices;
  if (failed(verifyRouting(*this, getX(), getWeight(), getBias(), getTopK(), getGates(),
                           getExperts(), experts, choices)))
    return failure();
  if (failed(checkAuxPerSequence(*this, getAuxPerSequence(), getX())))
    return failure();
  if (std::optional<APFloat> factor = getCapacityFactor())
    if (failed(
            checkCoefficient(*this, "capacity_factor", factor->convertToFloat(), /*strict=*/true)))
      return failure();
  return failure(
      failed(checkCoefficient(*this, "aux_loss_coef", getAuxLossCoef().convertToFloat(), false)) ||
      failed(checkCoefficient(*this, "z_loss_coef", getZLossCoef().convertToFloat(), false)) ||
      failed(checkCoefficient(*this, "routed_scaling", getRoutedScaling().convertToFloat(), true)));
}

/// Checks that `choices` ([..., k]) has the leading dimensions of `tokens`
/// ([..., D]).
static LogicalResult checkSameTokens(Operation *op, StringRef tokensName, Value tokens,
                                     StringRef choicesName, Value choices) {
  ArrayRef<int64_t> t = tensorType(tokens).getShape();
  ArrayRef<int64_t> c = tensorType(choices).getShape();
  if (c.empty() || t.empty() || t.drop_back() != c.drop_back())
    return op->emitOpError() << choicesName << " (" << formatShape(c)
                             << ") must be [..., k] with the leading dimensions of " << tokensName
                             << " (" << formatShape(t) << ")";
  return success();
}

LogicalResult DispatchOp::verify() {
  if (failed(checkSameTokens(*this, "x", getX(), "experts", getExperts())) ||
      failed(checkRank(*this, "result", getResult(), 3, "[E, C, D]")))
    return failure();
  ArrayRef<int64_t> r = tensorType(getResult()).getShape();
  int64_t d = tensorType(getX()).getShape().back();
  if (r[0] < 1 || r[1] < 1)
    return emitOpError() << "result needs at least one expert and one slot, "
                            "got "
                         << formatShape(r);
  if (r[2] != d)
    return emitOpError() << "result width " << r[2] << " must equal x width " << d;
  return checkSameElementType(*this, {{"x", getX()}, {"result", getResult()}});
}

LogicalResult ExpertFFNOp::verify() {
  if (failed(checkRank(*this, "x", getX(), 3, "[E, C, D]")))
    return failure();
  ArrayRef<int64_t> x = tensorType(getX()).getShape();
  int64_t experts = x[0];
  if (failed(verifyFFNWeights(*this, getActivation(), {experts}, x[2], getWUp(), getWDown(),
                              getWGate())) ||
      failed(checkSameElementType(
          *this,
          {{"x", getX()}, {"w_up", getWUp()}, {"w_down", getWDown()}, {"w_gate", getWGate()}})) ||
      failed(checkExpertRows(*this, getRows(), getX())))
    return failure();
  std::optional<PlacementAttr> placement = getPlacement();
  if (!placement)
    return success();
  GridAttr grid = getEnclosingGrid(*this);
  if (!grid)
    return emitOpError() << "placement requires a '" << MoEDialect::kGridAttrName
                         << "' attribute on the enclosing module";
  if (static_cast<int64_t>(placement->getNumRanks()) != grid.getEp())
    return emitOpError() << "placement lists " << placement->getNumRanks()
                         << " ranks but the grid has ep = " << grid.getEp();
  llvm::BitVector placed(experts);
  for (int64_t expert : placement->getExperts()) {
    if (expert >= experts)
      return emitOpError() << "placement names expert " << expert << " but there are " << experts
                           << " experts";
    placed.set(expert);
  }
  if (!placed.all())
    return emitOpError() << "placement leaves expert " << placed.find_first_unset()
                         << " on no rank";
  return success();
}

LogicalResult CombineOp::verify() {
  if (failed(checkRank(*this, "y", getY(), 3, "[E, C, D]")) ||
      failed(checkShape(*this, "experts", getExperts(), tensorType(getGates()).getShape())) ||
      failed(checkSameElementType(*this,
                                  {{"y", getY()}, {"gates", getGates()}, {"result", getResult()}})))
    return failure();
  ArrayRef<int64_t> gates = tensorType(getGates()).getShape();
  if (gates.empty())
    return emitOpError("gates must have rank >= 1 ([..., k])");
  return checkShape(*this, "result", getResult(),
                    withLast(gates, tensorType(getY()).getShape()[2]));
}
