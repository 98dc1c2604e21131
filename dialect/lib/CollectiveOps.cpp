//===- CollectiveOps.cpp - verifiers of the collectives -------------------===//

#include "VerifyUtils.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::checks;

/// Checks that `dim` indexes a dimension of `value`.
static LogicalResult checkDim(Operation *op, StringRef name, int64_t dim, Value value) {
  int64_t rank = tensorType(value).getRank();
  if (dim >= 0 && dim < rank)
    return success();
  return op->emitOpError() << name << " " << dim << " is out of range for rank " << rank;
}

/// Checks that `input`'s `dim` divides by `groupSize`.
static LogicalResult checkDivisible(Operation *op, StringRef name, Value input, int64_t dim,
                                    int64_t groupSize) {
  int64_t size = tensorType(input).getShape()[dim];
  if (size % groupSize == 0)
    return success();
  return op->emitOpError() << name << " dimension " << dim << " (" << size
                           << ") is not divisible by the group size " << groupSize;
}

/// The input shape with `dim` scaled by `mul / div`.
static SmallVector<int64_t> scaled(Value input, int64_t dim, int64_t mul, int64_t div) {
  SmallVector<int64_t> shape(tensorType(input).getShape());
  shape[dim] = shape[dim] * mul / div;
  return shape;
}

LogicalResult AllReduceOp::verify() {
  int64_t group;
  if (failed(verifyGroup(*this, getAxes(), group)))
    return failure();
  if (!std::isfinite(getScale().convertToDouble()))
    return emitOpError("scale must be finite");
  if (getAsync()) {
    if (getCodecAttr())
      return emitOpError("async reduction cannot have a codec");
    Value result = getResult();
    if (!result.hasOneUse() || !isa<WaitOp>(*result.getUsers().begin()) ||
        (*result.getUsers().begin())->getBlock() != (*this)->getBlock())
      return emitOpError("async result must have exactly one user, a moe.wait in the same block");
  }
  return verifyCodecUse(*this, getCodecAttr(), getInput(),
                        /*elementwiseOnly=*/false);
}

LogicalResult WaitOp::inferReturnTypes(MLIRContext *, std::optional<Location>, ValueRange operands,
                                       DictionaryAttr, OpaqueProperties, RegionRange,
                                       SmallVectorImpl<Type> &inferred) {
  llvm::append_range(inferred, operands.getTypes());
  return success();
}

Value WaitOp::source(Value v) {
  while (auto wait = v.getDefiningOp<WaitOp>())
    v = wait.getInputs()[cast<OpResult>(v).getResultNumber()];
  return v;
}

LogicalResult WaitOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one operand");
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    Operation *def = input.getDefiningOp();
    bool async = false;
    if (auto reduce = dyn_cast_or_null<AllReduceOp>(def))
      async = reduce.getAsync();
    else if (auto scatter = dyn_cast_or_null<ReduceScatterOp>(def))
      async = scatter.getAsync();
    else if (auto exchange = dyn_cast_or_null<AllToAllOp>(def))
      async = exchange.getAsync();
    if (!async || def->getBlock() != (*this)->getBlock())
      return emitOpError() << "operand #" << i
                           << " is not a result of an async moe.all_reduce, "
                              "moe.reduce_scatter or moe.all_to_all in the same block";
    if (isa<AllToAllOp>(def))
      for (Value other : def->getResults())
        if (!llvm::is_contained(getInputs(), other))
          return emitOpError() << "operand #" << i
                               << " is an async moe.all_to_all's result: its other result "
                                  "must be waited for in the same moe.wait";
  }
  return success();
}

LogicalResult ReplicaSumOp::verify() {
  int64_t group;
  if (failed(verifyGroup(*this, getAxes(), group)))
    return failure();
  if (int64_t layer = getLayerAttr().getInt(); layer < 0)
    return emitOpError() << "layer must be >= 0, got " << layer;
  if (cast<RankedTensorType>(getInput().getType()).getRank() < 1)
    return emitOpError("input must have rank >= 1 (rows of an expert shard)");
  return success();
}

LogicalResult ReduceScatterOp::verify() {
  int64_t group;
  if (failed(verifyGroup(*this, getAxes(), group)) ||
      failed(checkSameElementType(*this, {{"input", getInput()}, {"result", getResult()}})))
    return failure();
  double scale = getScale().convertToDouble();
  if (!(scale > 0) || !std::isfinite(scale))
    return emitOpError() << "scale must be finite and > 0, got " << scale;
  if (getAsync()) {
    if (getDim() || getCodecAttr())
      return emitOpError("async reduce_scatter must be flat and uncompressed");
    Value result = getResult();
    if (!result.hasOneUse() || !isa<WaitOp>(*result.getUsers().begin()) ||
        (*result.getUsers().begin())->getBlock() != (*this)->getBlock())
      return emitOpError("async result must have exactly one user, a moe.wait in the same block");
  }
  if (std::optional<int64_t> dim = getDim()) {
    if (failed(checkDim(*this, "dim", *dim, getInput())) ||
        failed(checkDivisible(*this, "input", getInput(), *dim, group)) ||
        failed(checkShape(*this, "result", getResult(), scaled(getInput(), *dim, 1, group))))
      return failure();
  } else {
    // Flat: this rank's ceil(n / P) elements of the padded vector.
    int64_t n = tensorType(getInput()).getNumElements();
    if (failed(checkShape(*this, "result", getResult(), {(n + group - 1) / group})))
      return failure();
  }
  return verifyCodecUse(*this, getCodecAttr(), getInput(), true);
}

LogicalResult TpEnterOp::verify() {
  int64_t group;
  return verifyGroup(*this, getAxes(), group);
}

LogicalResult TpExitOp::verify() {
  int64_t group;
  return verifyGroup(*this, getAxes(), group);
}

LogicalResult TpEnterOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  if (!resultGrads[0]) {
    operandGrads.assign({Value()});
    return success();
  }
  operandGrads.assign(
      {AllReduceOp::create(b, getLoc(), resultGrads[0].getType(),
                           ReductionAttr::get(b.getContext(), Reduction::sum), resultGrads[0],
                           getAxesAttr(), CodecAttr(), b.getF64FloatAttr(1.0))
           .getResult()});
  return success();
}

LogicalResult TpExitOp::buildGradient(OpBuilder &, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign({resultGrads[0]});
  return success();
}

LogicalResult ShardSliceOp::verify() {
  int64_t group;
  if (failed(verifyGroup(*this, getAxes(), group)) ||
      failed(checkSameElementType(*this, {{"input", getInput()}, {"result", getResult()}})))
    return failure();
  int64_t n = tensorType(getInput()).getNumElements();
  return checkShape(*this, "result", getResult(), {(n + group - 1) / group});
}

LogicalResult GatherParamOp::verify() {
  int64_t group;
  return verifyGroup(*this, getAxes(), group);
}

LogicalResult GatherParamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (!symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr()))
    return emitOpError() << "'" << getParam() << "' does not name a moe.param";
  return success();
}

LogicalResult AllGatherOp::verify() {
  int64_t group, dim = getDim();
  if (failed(verifyGroup(*this, getAxes(), group)) ||
      failed(checkDim(*this, "dim", dim, getInput())) ||
      failed(checkShape(*this, "result", getResult(), scaled(getInput(), dim, group, 1))) ||
      failed(checkSameElementType(*this, {{"input", getInput()}, {"result", getResult()}})))
    return failure();
  return verifyCodecUse(*this, getCodecAttr(), getInput(), true);
}

LogicalResult AllToAllOp::verify() {
  int64_t group, split = getSplitDim(), concat = getConcatDim();
  if (failed(verifyGroup(*this, getAxes(), group)) ||
      failed(checkDim(*this, "split_dim", split, getInput())) ||
      failed(checkDim(*this, "concat_dim", concat, getInput())) ||
      failed(checkDivisible(*this, "input", getInput(), split, group)))
    return failure();
  SmallVector<int64_t> expected = scaled(getInput(), split, 1, group);
  expected[concat] *= group;
  if (failed(checkShape(*this, "result", getResult(), expected)) ||
      failed(checkSameElementType(*this, {{"input", getInput()}, {"result", getResult()}})))
    return failure();
  bool sends = static_cast<bool>(getSendCounts());
  if (sends != static_cast<bool>(getRecvCounts()))
    return emitOpError("counts operand and recv_counts result must come "
                       "together (ragged form)");
  if (sends && split == 0 && concat == 0) {
    if (failed(checkShape(*this, "counts", getSendCounts(), {group})) ||
        failed(checkShape(*this, "recv_counts", getRecvCounts(), {group})))
      return failure();
  } else if (sends) {
    // Dispatch buffers: [E, C, D] <-> [E/P, P*C, D], valid leading rows per
    // block, E counts each way.
    ArrayRef<int64_t> in = tensorType(getInput()).getShape();
    if (!((split == 0 && concat == 1) || (split == 1 && concat == 0)) || in.size() != 3)
      return emitOpError() << "ragged all_to_all is split 0 concat 0 (rows), or "
                              "split 0 concat 1 / split 1 concat 0 on a rank-3 "
                              "dispatch buffer; got split "
                           << split << " and concat " << concat << " on rank " << in.size();
    int64_t blocks = split == 0 ? in[0] : in[0] * group;
    if (failed(checkShape(*this, "counts", getSendCounts(), {blocks})) ||
        failed(checkShape(*this, "recv_counts", getRecvCounts(), {blocks})))
      return failure();
  }
  if (getAsync()) {
    if (!sends || split == concat || getCodecAttr())
      return emitOpError("async all_to_all must be the ragged dispatch form without a codec");
    Operation *wait = nullptr;
    for (Value result : getResults())
      for (Operation *user : result.getUsers()) {
        if (!isa<WaitOp>(user) || user->getBlock() != (*this)->getBlock() || (wait && wait != user))
          return emitOpError("async results must have one user, a moe.wait in the same block");
        wait = user;
      }
  }
  return verifyCodecUse(*this, getCodecAttr(), getInput(), true);
}

LogicalResult AllToAllOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  Value counts = getSendCounts();
  if (counts && getSplitDim() == 0 && getConcatDim() == 0)
    return emitOpError("the ragged row form has no gradient rule");
  if (!resultGrads[0]) {
    operandGrads.assign({Value(), Value()});
    operandGrads.resize(getNumOperands());
    return success();
  }
  // The transposed exchange; a ragged one sends back along the blocks it
  // received (its counts are this op's recv_counts).
  SmallVector<Type> types = {getInput().getType()};
  if (counts)
    types.push_back(counts.getType());
  auto back =
      AllToAllOp::create(b, getLoc(), types, resultGrads[0], counts ? getRecvCounts() : Value(),
                         getAxesAttr(), getConcatDimAttr(), getSplitDimAttr(), getCodecAttr());
  operandGrads.assign({back.getResult()});
  if (counts)
    operandGrads.push_back(Value()); // counts are integers
  return success();
}
