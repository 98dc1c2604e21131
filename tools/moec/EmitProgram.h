//===- EmitProgram.h - the step program as C++ ------------------*- C++ -*-===//

#ifndef MOEC_EMITPROGRAM_H
#define MOEC_EMITPROGRAM_H

#include "KernelTable.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace moec {

/// Writes the C++ step program of a lowered module (after
/// moe-lower-to-kernels): the parameter table and `moec_program` whose
/// train_step runs every launch in order over the planned arenas, calling
/// the generated kernels and the runtime's scalar routines (moert/Program.h).
mlir::LogicalResult emitStepProgram(mlir::ModuleOp module,
                                    const std::map<std::string, KernelCall> &calls,
                                    llvm::raw_ostream &os);

} // namespace moec

#endif // MOEC_EMITPROGRAM_H
