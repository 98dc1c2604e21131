//===- OptimizerOps.cpp - verifiers of the optimiser ops ------------------===//

#include "VerifyUtils.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;

LogicalResult LRScheduleOp::verify() {
  double lr = getLr().convertToDouble(), minLr = getMinLr().convertToDouble();
  if (!(lr > 0))
    return emitOpError() << "lr must be > 0, got " << lr;
  if (!(minLr >= 0 && minLr <= lr))
    return emitOpError() << "min_lr must be in [0, lr], got " << minLr;
  // Signed: the I64Attr getters return the bits as uint64_t.
  int64_t warmup = getWarmupStepsAttr().getInt(), total = getTotalStepsAttr().getInt();
  if (total < 1 || warmup < 0 || warmup > total)
    return emitOpError() << "needs 0 <= warmup_steps <= total_steps and "
                            "total_steps >= 1, got "
                         << warmup << " and " << total;
  StringRef s = getSchedule();
  if (s != "cosine" && s != "linear" && s != "constant")
    return emitOpError() << "schedule must be cosine, linear or constant, got '" << s << "'";
  return success();
}

LogicalResult GlobalNormOp::verify() {
  if (getGrads().empty())
    return emitOpError("needs at least one gradient");
  if (static_cast<bool>(getSharded()) != static_cast<bool>(getShardAxes()))
    return emitOpError("sharded and shard_axes come together");
  if (getSharded() && getSharded()->size() != getGrads().size())
    return emitOpError() << "sharded has " << getSharded()->size() << " entries for "
                         << getGrads().size() << " operands";
  if (getShardAxes()) {
    int64_t group;
    if (failed(checks::verifyGroup(*this, *getShardAxes(), group)))
      return failure();
  }
  if (auto layers = getShardLayers()) {
    if (!getSharded())
      return emitOpError("shard_layers needs sharded");
    if (layers->size() != getGrads().size())
      return emitOpError() << "shard_layers has " << layers->size() << " entries for "
                           << getGrads().size() << " operands";
    for (auto [i, layer] : llvm::enumerate(*layers))
      if (layer < -1 || (layer >= 0 && !(*getSharded())[i]))
        return emitOpError() << "shard_layers[" << i << "] must be -1, or a layer >= 0 of a "
                             << "sharded operand, got " << layer;
  }
  if (auto copies = getShardCopies()) {
    if (!getSharded())
      return emitOpError("shard_copies needs sharded");
    if (copies->size() != getGrads().size())
      return emitOpError() << "shard_copies has " << copies->size() << " entries for "
                           << getGrads().size() << " operands";
    for (auto [i, n] : llvm::enumerate(*copies))
      if (n < 1)
        return emitOpError() << "shard_copies[" << i << "] must be >= 1, got " << n;
  }
  return success();
}

LogicalResult SumSquaresOp::verify() {
  auto result = cast<RankedTensorType>(getType());
  int64_t n = cast<RankedTensorType>(getInput().getType()).getNumElements();
  if (result.getRank() != 2)
    return emitOpError() << "result must be 2-D (rows x chunks), got rank " << result.getRank();
  int64_t rows = result.getShape()[0], chunks = result.getShape()[1];
  if (rows < 1 || chunks < 1 || n % rows || (n / rows) % chunks)
    return emitOpError() << rows << " rows of " << chunks << " chunks do not divide the input's "
                         << n << " elements";
  return success();
}

LogicalResult AdamWUpdateOp::verify() {
  double b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble();
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
    return emitOpError() << "betas must be in [0, 1), got " << b1 << " and " << b2;
  if (!(getEps().convertToDouble() > 0))
    return emitOpError("eps must be > 0");
  if (!(getWeightDecay().convertToDouble() >= 0) || !(getGradClip().convertToDouble() >= 0))
    return emitOpError("weight_decay and grad_clip must be >= 0");
  return success();
}

LogicalResult AdamWUpdateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError() << "'" << getParam() << "' does not name a moe.param";
  if (ArrayAttr axes = getShardAxesAttr()) {
    // ZeRO: this rank's flat shard of the parameter.
    int64_t group;
    if (failed(checks::verifyGroup(*this, axes, group)))
      return failure();
    RankedTensorType type = param.getTensorType();
    int64_t shard = (type.getNumElements() + group - 1) / group;
    auto expected = RankedTensorType::get({shard}, type.getElementType());
    if (getGrad().getType() != expected)
      return emitOpError() << "sharded gradient type " << getGrad().getType()
                           << " is not parameter '" << getParam() << "''s shard " << expected
                           << " over " << group << " ranks";
    return success();
  }
  if (param.getType() != getGrad().getType())
    return emitOpError() << "gradient type " << getGrad().getType() << " differs from parameter '"
                         << getParam() << "' of type " << param.getType();
  return success();
}

LogicalResult BalanceBiasOp::verify() {
  double rate = getRate().convertToDouble();
  if (!(rate >= 0) || !std::isfinite(rate))
    return emitOpError() << "rate must be finite and >= 0, got " << rate;
  if (checks::tensorType(getExperts()).getRank() < 1)
    return emitOpError("experts must be [..., k] expert indices");
  if (getSumAxes()) {
    int64_t group;
    if (failed(checks::verifyGroup(*this, *getSumAxes(), group)))
      return failure();
  }
  return success();
}

LogicalResult BalanceBiasOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError() << "'" << getParam() << "' does not name a moe.param";
  RankedTensorType type = param.getTensorType();
  if (type.getRank() != 1 || !type.getElementType().isF32())
    return emitOpError() << "parameter '" << getParam()
                         << "' must be a [E] f32 selection bias, got " << type;
  return success();
}
