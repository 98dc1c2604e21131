//===- KernelOps.cpp - kernel specs and launches --------------------------===//

#include "VerifyUtils.h"

using namespace mlir;
using namespace mlir::moe;

LogicalResult KernelOp::verify() {
  if (getFamily().empty())
    return emitOpError("family must not be empty");
  return success();
}

LogicalResult LaunchOp::verify() {
  if (getBuffers().size() != 3 * getResults().size())
    return emitOpError() << "buffers must have 3 entries per result ("
                         << 3 * getResults().size() << "), got "
                         << getBuffers().size();
  return success();
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto kernel =
      symbolTable.lookupNearestSymbolFrom<KernelOp>(*this, getKernelAttr());
  if (!kernel)
    return emitOpError() << "'" << getKernel() << "' does not name a moe.kernel";
  FunctionType signature = kernel.getSignature();
  if (!llvm::equal(signature.getInputs(), getOperands().getTypes()) ||
      !llvm::equal(signature.getResults(), getResults().getTypes()))
    return emitOpError() << "types do not match the signature " << signature
                         << " of kernel '" << getKernel() << "'";
  return success();
}
