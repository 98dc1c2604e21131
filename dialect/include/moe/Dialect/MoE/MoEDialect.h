//===- MoEDialect.h - the moe dialect ---------------------------*- C++ -*-===//
//
// Dialect, enums and attributes of the moe dialect.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_MOEDIALECT_H
#define MOE_DIALECT_MOE_MOEDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "moe/Dialect/MoE/MoEDialect.h.inc"
#include "moe/Dialect/MoE/MoEEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/MoE/MoEAttributes.h.inc"

#endif // MOE_DIALECT_MOE_MOEDIALECT_H
