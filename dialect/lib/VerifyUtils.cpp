//===- VerifyUtils.cpp - helpers shared by moe verifiers ------------------===//

#include "VerifyUtils.h"

#include <cmath>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::checks;

std::string checks::formatShape(ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::interleave(shape, os, "x");
  return out;
}

LogicalResult checks::checkShape(Operation *op, StringRef name, Value value,
                                 ArrayRef<int64_t> expected) {
  ArrayRef<int64_t> actual = tensorType(value).getShape();
  if (actual == expected)
    return success();
  return op->emitOpError() << name << " must have shape " << formatShape(expected) << ", got "
                           << formatShape(actual);
}

LogicalResult checks::checkRank(Operation *op, StringRef name, Value value, int64_t rank,
                                StringRef layout) {
  int64_t actual = tensorType(value).getRank();
  if (actual == rank)
    return success();
  return op->emitOpError() << name << " must have rank " << rank << " (" << layout << "), got rank "
                           << actual;
}

LogicalResult checks::checkSameElementType(Operation *op,
                                           ArrayRef<std::pair<StringRef, Value>> namedValues) {
  if (namedValues.empty())
    return success();
  Type first = tensorType(namedValues.front().second).getElementType();
  for (auto [name, value] : namedValues.drop_front()) {
    if (!value)
      continue;
    Type type = tensorType(value).getElementType();
    if (type != first)
      return op->emitOpError() << name << " must have element type " << first << " (that of "
                               << namedValues.front().first << "), got " << type;
  }
  return success();
}

LogicalResult checks::verifyFFNWeights(Operation *op, Activation activation,
                                       ArrayRef<int64_t> group, int64_t d, Value up, Value down,
                                       Value gate) {
  auto rank = static_cast<int64_t>(group.size()) + 2;
  StringRef layoutUp = group.empty() ? "[D, F]" : "[E, D, F]";
  StringRef layoutDown = group.empty() ? "[F, D]" : "[E, F, D]";
  if (failed(checkRank(op, "w_up", up, rank, layoutUp)) ||
      failed(checkRank(op, "w_down", down, rank, layoutDown)))
    return failure();
  ArrayRef<int64_t> upShape = tensorType(up).getShape();
  SmallVector<int64_t> expectedUp(group);
  expectedUp.append({d, upShape.back()});
  if (failed(checkShape(op, "w_up", up, expectedUp)))
    return failure();
  SmallVector<int64_t> expectedDown(group);
  expectedDown.append({upShape.back(), d});
  if (failed(checkShape(op, "w_down", down, expectedDown)))
    return failure();
  if (activation == Activation::swiglu) {
    if (!gate)
      return op->emitOpError("swiglu activation requires a gate weight");
    if (failed(checkShape(op, "w_gate", gate, expectedUp)))
      return failure();
  } else if (gate) {
    return op->emitOpError() << stringifyActivation(activation)
                             << " activation takes no gate weight";
  }
  return success();
}

LogicalResult checks::verifyGroup(Operation *op, ArrayAttr axes, int64_t &groupSize) {
  if (axes.empty())
    return op->emitOpError("must name at least one grid axis");
  llvm::SmallSet<StringRef, 3> seen;
  for (Attribute axis : axes) {
    StringRef name = cast<StringAttr>(axis).getValue();
    if (name != "dp" && name != "ep" && name != "tp")
      return op->emitOpError() << "unknown grid axis '" << name << "' (expected dp, ep or tp)";
    if (!seen.insert(name).second)
      return op->emitOpError() << "grid axis '" << name << "' is listed twice";
  }
  GridAttr grid = getEnclosingGrid(op);
  if (!grid)
    return op->emitOpError() << "requires a '" << MoEDialect::kGridAttrName
                             << "' attribute on the enclosing module";
  groupSize = grid.getGroupSize(axes.getValue());
  return success();
}

LogicalResult checks::checkRoutingGroups(Operation *op, int64_t groups,
                                         DenseI64ArrayAttr groupSizes, Value x) {
  if (groups < 1)
    return op->emitOpError() << "groups must be >= 1, got " << groups;
  ArrayRef<int64_t> shape = tensorType(x).getShape();
  int64_t lead = shape.size() > 1 ? shape.front() : 1;
  if (groupSizes) {
    // Unequal groups of whole sequences, in tokens.
    int64_t tokens = tensorType(x).getNumElements() / std::max<int64_t>(shape.back(), 1);
    int64_t sequence = tokens / std::max<int64_t>(lead, 1), sum = 0;
    if (static_cast<int64_t>(groupSizes.size()) != groups)
      return op->emitOpError() << "group_sizes has " << groupSizes.size()
                               << " entries for groups = " << groups;
    for (int64_t size : groupSizes.asArrayRef()) {
      if (size < 1 || size % sequence != 0)
        return op->emitOpError() << "group_sizes entry " << size
                                 << " is not a positive number of whole sequences of " << sequence
                                 << " tokens";
      sum += size;
    }
    if (sum != tokens)
      return op->emitOpError() << "group_sizes sum to " << sum << " tokens, not the " << tokens
                               << " tokens of x";
    return success();
  }
  if (groups > 1 && lead % groups != 0)
    return op->emitOpError() << "groups (" << groups << ") must divide the batch dimension ("
                             << lead << "): a group is whole sequences";
  return success();
}

LogicalResult checks::verifyCodecUse(Operation *op, CodecAttr codec, Value input,
                                     bool elementwiseOnly) {
  if (!codec)
    return success();
  if (elementwiseOnly && !codec.isElementwise())
    return op->emitOpError() << "codec " << stringifyCodecKind(codec.getKind())
                             << " cannot compress " << op->getName()
                             << " (allowed: fp16, bf16, int8)";
  RankedTensorType type = tensorType(input);
  Type element = type.getElementType();
  if ((codec.getKind() == CodecKind::fp16 && element.isF16()) ||
      (codec.getKind() == CodecKind::bf16 && element.isBF16()))
    return op->emitOpError() << "codec " << stringifyCodecKind(codec.getKind())
                             << " does not compress " << element << " data";
  if (codec.getKind() == CodecKind::powersgd && type.getRank() < 2)
    return op->emitOpError() << "codec powersgd needs a tensor of rank >= 2, got rank "
                             << type.getRank();
  return success();
}

/// A selection bias has x's element type, or f32 (a low-precision model keeps
/// it in f32: moe.balance_bias steps it by 1e-3, below bf16's resolution).
static LogicalResult checkBiasType(Operation *op, Value x, Value bias) {
  if (!bias)
    return success();
  Type type = tensorType(bias).getElementType(), element = tensorType(x).getElementType();
  if (type == element || type.isF32())
    return success();
  return op->emitOpError() << "bias must have element type " << element
                           << " (that of x) or f32, got " << type;
}

LogicalResult checks::verifyRouting(Operation *op, Value x, Value weight, Value bias, int64_t topK,
                                    Value gates, Value expertIds, int64_t &experts,
                                    SmallVectorImpl<int64_t> &choices) {
  ArrayRef<int64_t> xs = tensorType(x).getShape();
  if (xs.empty())
    return op->emitOpError("x must have rank >= 1");
  if (failed(checkRank(op, "weight", weight, 2, "[D, E]")))
    return failure();
  ArrayRef<int64_t> w = tensorType(weight).getShape();
  if (w[0] != xs.back())
    return op->emitOpError() << "weight input dimension " << w[0] << " does not match x width "
                             << xs.back();
  experts = w[1];
  if (bias && failed(checkShape(op, "bias", bias, {experts})))
    return failure();
  if (auto rate = op->getAttrOfType<FloatAttr>("bias_update_rate")) {
    if (!bias)
      return op->emitOpError("bias_update_rate needs a selection bias operand");
    double r = rate.getValueAsDouble();
    if (!(r >= 0) || !std::isfinite(r))
      return op->emitOpError() << "bias_update_rate must be finite and >= 0, got " << r;
  }
  if (topK < 1 || topK > experts)
    return op->emitOpError() << "top_k (" << topK << ") must be in [1, " << experts
                             << "], the number of experts";
  auto intAttr = [&](StringRef name) {
    auto attr = op->getAttrOfType<IntegerAttr>(name);
    return attr ? attr.getInt() : int64_t(1);
  };
  if (failed(
          checkExpertGroups(op, experts, topK, intAttr("expert_groups"), intAttr("topk_groups"))))
    return failure();
  choices.assign(xs.begin(), xs.end() - 1);
  choices.push_back(topK);
  return failure(
      failed(checkShape(op, "gates", gates, choices)) ||
      failed(checkShape(op, "experts", expertIds, choices)) ||
      failed(checkSameElementType(op, {{"x", x}, {"weight", weight}, {"gates", gates}})) ||
      failed(checkBiasType(op, x, bias)));
}

LogicalResult checks::checkExpertGroups(Operation *op, int64_t experts, int64_t topK,
                                        int64_t groups, int64_t topkGroups) {
  if (groups < 1 || experts % groups != 0)
    return op->emitOpError() << "expert_groups (" << groups << ") must be >= 1 and divide the "
                             << experts << " experts";
  if (topkGroups < 1 || topkGroups > groups)
    return op->emitOpError() << "topk_groups (" << topkGroups << ") must be in [1, " << groups
                             << "], the number of expert groups";
  if (topK > topkGroups * (experts / groups))
    return op->emitOpError() << "top_k (" << topK << ") exceeds the "
                             << topkGroups * (experts / groups) << " experts of topk_groups ("
                             << topkGroups << ") groups of " << experts / groups;
  return success();
}

LogicalResult checks::checkExpertRows(Operation *op, Value rows, Value x) {
  if (!rows)
    return success();
  auto type = tensorType(rows);
  ArrayRef<int64_t> buf = tensorType(x).getShape();
  if (type.getRank() != 1 || buf.size() != 3)
    return op->emitOpError() << "rows must be 1-d, got " << formatShape(type.getShape());
  int64_t n = type.getShape()[0], experts = buf[0], slots = buf[1];
  if (n < experts || n % experts != 0 || slots % (n / experts) != 0)
    return op->emitOpError() << "rows has " << n << " entries; expected E * G for the " << experts
                             << " experts, with G dividing the " << slots << " slots";
  return success();
}

/// moe.sigmoid_gate and its gradient: a gate of x's shape with a last
/// dimension of 1 and x's element type.
LogicalResult checks::checkSigmoidGate(Operation *op, Value x, Value gate) {
  SmallVector<int64_t> expected(tensorType(x).getShape());
  if (expected.empty())
    return op->emitOpError("x must have rank >= 1");
  expected.back() = 1;
  if (failed(checkShape(op, "gate", gate, expected)))
    return failure();
  return checkSameElementType(op, {{"x", x}, {"gate", gate}});
}

LogicalResult checks::checkClampLimit(Operation *op, float limit) {
  if (std::isfinite(limit) && limit > 0)
    return success();
  return op->emitOpError() << "limit must be finite and > 0, got " << limit;
}

LogicalResult checks::checkLatentAttention(Operation *op, Value q, Value k, Value kRope, Value v,
                                           int64_t heads, std::optional<APFloat> theta) {
  if (failed(checkRank(op, "q", q, 3, "[B, S, H * (dn + dr)]")) ||
      failed(checkRank(op, "k", k, 3, "[B, S, H * dn]")) ||
      failed(checkRank(op, "k_rope", kRope, 3, "[B, S, dr]")) ||
      failed(checkRank(op, "v", v, 3, "[B, S, H * dv]")) ||
      failed(checkSameElementType(op, {{"q", q}, {"k", k}, {"k_rope", kRope}, {"v", v}})))
    return failure();
  if (heads < 1)
    return op->emitOpError() << "heads must be >= 1, got " << heads;
  ArrayRef<int64_t> qs = tensorType(q).getShape();
  int64_t kw = tensorType(k).getShape()[2], vw = tensorType(v).getShape()[2];
  int64_t dr = tensorType(kRope).getShape()[2];
  if (kw % heads != 0 || kw < heads)
    return op->emitOpError() << "k width " << kw << " is not a positive multiple of heads ("
                             << heads << ")";
  if (vw % heads != 0 || vw < heads)
    return op->emitOpError() << "v width " << vw << " is not a positive multiple of heads ("
                             << heads << ")";
  if (dr < 1)
    return op->emitOpError("k_rope must have a width >= 1");
  int64_t dn = kw / heads;
  if (failed(checkShape(op, "k", k, {qs[0], qs[1], kw})) ||
      failed(checkShape(op, "k_rope", kRope, {qs[0], qs[1], dr})) ||
      failed(checkShape(op, "v", v, {qs[0], qs[1], vw})) ||
      failed(checkShape(op, "q", q, {qs[0], qs[1], heads * (dn + dr)})))
    return failure();
  if (theta) {
    if (!(theta->convertToFloat() > 0.0f))
      return op->emitOpError() << "rope_theta must be > 0, got " << theta->convertToFloat();
    if (dr % 2 != 0)
      return op->emitOpError() << "rotary embeddings need an even k_rope width, got " << dr;
  }
  return success();
}

LogicalResult checks::checkAuxPerSequence(Operation *op, bool perSequence, Value x) {
  if (perSequence && tensorType(x).getRank() < 3)
    return op->emitOpError() << "aux_per_sequence needs x of rank >= 3 ([B, S, ..., D]: its "
                                "sequences), got rank "
                             << tensorType(x).getRank();
  return success();
}
