//===- PassPlugins.h - pass plugins named on a command line -----*- C++ -*-===//
//
// moe-opt and moec load MLIR pass plugins (`--load-pass-plugin LIB`) before
// they parse the rest of their command line, so that a plugin's passes are
// flags and pipeline names like MoEC's own (docs/OutOfTree.md).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_PASSPLUGINS_H
#define MOE_TRANSFORMS_PASSPLUGINS_H

#include "mlir/Support/LLVM.h"

#include <string>
#include <vector>

namespace mlir::moe {

/// Loads every plugin `argv` names with `--load-pass-plugin LIB` or
/// `--load-pass-plugin=LIB` (one dash too) and registers its passes. On
/// success `rest` holds the other arguments (argv[0] first); a plugin that
/// cannot be loaded is an error naming it, printed with `tool`'s name.
LogicalResult loadPassPlugins(int argc, char **argv, StringRef tool, std::vector<char *> &rest,
                              std::vector<std::string> *loaded = nullptr);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSPLUGINS_H
