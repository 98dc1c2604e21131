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
} // namespace mlir::moe

#define GET_OP_CLASSES
#include "moe/Dialect/MoE/MoEOps.h.inc"

#endif // MOE_DIALECT_MOE_MOEOPS_H
