//===- KernelOps.cpp - kernel specs and launches --------------------------===//

#include "VerifyUtils.h"

using namespace mlir;
using namespace mlir::moe;

LogicalResult KernelOp::verify() {
  if (getFamily().empty())
    return emitOpError("family must not be empty");
  // A kernel computes one moe compute op (moe-lower-to-kernels): its family
  // is that op's mnemonic and its config that op's attributes.
  static constexpr StringLiteral kNotCompute[] = {"param",      "get_param",      "fill",
                                                  "kernel",     "launch",         "all_reduce",
                                                  "all_to_all", "reduce_scatter", "all_gather"};
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
