//===- KernelOps.cpp - kernel specs and launches --------------------------===//

#include "VerifyUtils.h"

using namespace mlir;
using namespace mlir::moe;

LogicalResult KernelOp::verify() {
  if (getFamily().empty())
    return emitOpError("family must not be empty");
  // A kernel computes one moe compute op (moe-lower-to-kernels): its family
  // is that op's mnemonic and its config that op's attributes.
  static constexpr StringLiteral kNotCompute[] = {
      "param",      "get_param",      "fill",       "kernel", "launch", "all_reduce",
      "all_to_all", "reduce_scatter", "all_gather", "chunk",  "concat", "wait"};
  std::optional<RegisteredOperationName> op =
      RegisteredOperationName::lookup(("moe." + getFamily()).str(), getContext());
  if (!op || llvm::is_contained(kNotCompute, getFamily()))
    return emitOpError() << "family '" << getFamily()
                         << "' names no moe compute op (a kernel family is the "
                            "mnemonic of the op it computes)";
  ArrayRef<StringAttr> names = op->getAttributeNames();
  for (NamedAttribute entry : getConfig())
    if (!llvm::is_contained(names, entry.getName()))
      return emitOpError() << "config key '" << entry.getName().getValue()
                           << "' is not an attribute of moe." << getFamily();
  static constexpr StringLiteral kEpilogues[] = {"residual_add", "save_preactivations",
                                                 "saved_preactivations"};
  for (Attribute e : getEpilogue())
    if (!llvm::is_contained(kEpilogues, cast<StringAttr>(e).getValue()))
      return emitOpError() << "epilogue " << e
                           << " is none of residual_add, save_preactivations, "
                              "saved_preactivations";
  return success();
}

LogicalResult LaunchOp::verify() {
  if (getBuffers().size() != 3 * getResults().size())
    return emitOpError() << "buffers must have 3 entries per result (" << 3 * getResults().size()
                         << "), got " << getBuffers().size();
  if (ArrayAttr axes = getShardAxesAttr()) {
    if (!getUpdates())
      return emitOpError("shard_axes needs updates (a sharded optimiser update)");
    int64_t group;
    return checks::verifyGroup(*this, axes, group);
  }
  return success();
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto kernel = symbolTable.lookupNearestSymbolFrom<KernelOp>(*this, getKernelAttr());
  if (!kernel)
    return emitOpError() << "'" << getKernel() << "' does not name a moe.kernel";
  FunctionType signature = kernel.getSignature();
  if (!llvm::equal(signature.getInputs(), getOperands().getTypes()) ||
      !llvm::equal(signature.getResults(), getResults().getTypes()))
    return emitOpError() << "types do not match the signature " << signature << " of kernel '"
                         << getKernel() << "'";
  return success();
}

LogicalResult ChunkOp::verify() {
  int64_t count = getCount(), index = getIndex();
  if (count < 1)
    return emitOpError() << "count must be >= 1, got " << count;
  if (index < 0 || index >= count)
    return emitOpError() << "index must be in [0, " << count << "), got " << index;
  auto in = cast<RankedTensorType>(getInput().getType());
  if (in.getRank() < 1 || in.getDimSize(0) % count)
    return emitOpError() << "input must have a leading dimension divisible by " << count << ", got "
                         << in;
  SmallVector<int64_t> shape(in.getShape());
  shape[0] /= count;
  if (getResult().getType() != in.clone(shape))
    return emitOpError() << "result must be " << in.clone(shape) << ", got "
                         << getResult().getType();
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  auto in = cast<RankedTensorType>(getInputs().front().getType());
  for (auto [i, input] : llvm::enumerate(getInputs()))
    if (input.getType() != in)
      return emitOpError() << "input #" << i << " must be " << in << " like input #0, got "
                           << input.getType();
  if (in.getRank() < 1)
    return emitOpError("inputs must have rank >= 1");
  SmallVector<int64_t> shape(in.getShape());
  shape[0] *= static_cast<int64_t>(getInputs().size());
  if (getResult().getType() != in.clone(shape))
    return emitOpError() << "result must be " << in.clone(shape) << ", got "
                         << getResult().getType();
  return success();
}
