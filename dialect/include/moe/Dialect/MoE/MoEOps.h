//===- MoEOps.h - moe operations --------------------------------*- C++ -*-===//

#ifndef MOE_DIALECT_MOE_MOEOPS_H
#define MOE_DIALECT_MOE_MOEOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "moe/Dialect/MoE/MoEDialect.h"
#include "llvm/ADT/SmallVector.h"

#include "moe/Dialect/MoE/MoEInterfaces.h.inc"

namespace mlir::moe {
/// The grid of the module enclosing `op`, or null when it has none.
GridAttr getEnclosingGrid(Operation *op);

/// The largest tensor a moe op may take or make, in bytes (2^48, 256 TiB):
/// sums over thousands of such tensors still fit in int64.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 48;

/// Checks every tensor operand and result of `op` against kMaxTensorBytes.
LogicalResult verifyBoundedTensors(Operation *op);

/// The op trait that calls verifyBoundedTensors (every moe op has it).
template <typename ConcreteType>
class BoundedTensors : public OpTrait::TraitBase<ConcreteType, BoundedTensors> {
public:
  static LogicalResult verifyTrait(Operation *op) { return verifyBoundedTensors(op); }
};
} // namespace mlir::moe

#define GET_OP_CLASSES
#include "moe/Dialect/MoE/MoEOps.h.inc"

#endif // MOE_DIALECT_MOE_MOEOPS_H
