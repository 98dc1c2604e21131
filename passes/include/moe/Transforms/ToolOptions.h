//===- ToolOptions.h - what the tools' --help lists -------------*- C++ -*-===//
//
// libMLIR.so brings every LLVM back end's command-line options (hundreds:
// --aarch64-..., --amdgpu-..., --x86-...), registered by static
// initialisers before main. moe-opt and moe-lsp-server hide them, so their
// --help lists MLIR's options, the passes and MoEC's own; --help-hidden
// still lists everything and every option still works.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_TOOLOPTIONS_H
#define MOE_TRANSFORMS_TOOLOPTIONS_H

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"

namespace mlir::moe {

/// Hides the options registered so far (call first thing in main), except
/// --help, --help-list, --version and --color.
inline void hideOptionsRegisteredBeforeMain() {
  for (auto &entry : llvm::cl::getRegisteredOptions())
    if (!llvm::is_contained({"help", "help-list", "version", "color"}, entry.first))
      entry.second->setHiddenFlag(llvm::cl::Hidden);
}

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_TOOLOPTIONS_H
