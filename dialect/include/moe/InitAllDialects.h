//===- InitAllDialects.h - dialects moe tools load --------------*- C++ -*-===//
//
// The one place that lists the dialects moe-opt, moe-translate and the
// driver register: the moe dialect and the upstream dialects moe IR uses.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_INITALLDIALECTS_H
#define MOE_INITALLDIALECTS_H

#include "moe/Dialect/MoE/MoEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"

namespace mlir::moe {
inline void registerAllDialects(DialectRegistry &registry) {
  registry.insert<MoEDialect, func::FuncDialect>();
}
} // namespace mlir::moe

#endif // MOE_INITALLDIALECTS_H
