//===- ParamOps.cpp - moe.param and moe.get_param -------------------------===//

#include "VerifyUtils.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::checks;

LogicalResult ParamOp::verify() {
  RankedTensorType type = getTensorType();
  if (type.getRank() < 1)
    return emitOpError("parameter must have rank >= 1");
  for (int64_t dim : type.getShape())
    if (dim < 1)
      return emitOpError() << "parameter dimensions must be >= 1, got "
                           << formatShape(type.getShape());
  return success();
}

LogicalResult GetParamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getNameAttr());
  if (!param)
    return emitOpError() << "'" << getName() << "' does not name a moe.param";
  if (param.getType() != getResult().getType())
    return emitOpError() << "result type " << getResult().getType() << " differs from parameter '"
                         << getName() << "' of type " << param.getType();
  return success();
}
